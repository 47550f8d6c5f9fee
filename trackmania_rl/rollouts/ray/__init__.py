"""Collector actors on a Ray cluster (optional install: pip install -e ".[ray]"; docs/cluster.md).

Ray reads its authentication mode when it is imported, so it is set here, before any module of this package
imports ray: token authentication on (unless the environment says otherwise), usage statistics off.
"""

import os

os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
