"""The run's bearer token for the HTTP API: save/<run>/http_token (docs/http-api.md §6).

Created at the run's first start with O_CREAT | O_EXCL and mode 0600 (never readable by other users, never
written over by a second process racing for it), kept across resumes, replaced only by `--new-token`.
Requests are compared against it in constant time.
"""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path

TOKEN_FILE = "http_token"
TOKEN_BYTES = 32  # 256 random bits, hex in the file


def _create(path: Path) -> str:
    token = secrets.token_hex(TOKEN_BYTES)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def run_token(run_dir: Path, new: bool = False) -> tuple[str, Path, bool]:
    """(token, its path, whether it was created now). `new` replaces an existing token: the old file is
    removed first, so the new one is still created exclusively with mode 0600."""
    path = Path(run_dir) / TOKEN_FILE
    if new and path.exists():
        path.unlink()
    try:
        return _create(path), path, True
    except FileExistsError:
        pass
    token = read_token(path)
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        os.chmod(path, 0o600)  # someone loosened it: tighten it again
    return token, path, False


def read_token(path: str | Path) -> str:
    """The token in a token file (a client's --token-file); ValueError when it holds none."""
    token = Path(path).read_text().strip()
    if not token or any(c.isspace() for c in token):
        raise ValueError(f"{path} holds no token (one line of text expected)")
    return token


def token_matches(expected: str, authorization: str | None) -> bool:
    """Whether an Authorization header carries `Bearer <expected>`, compared in constant time."""
    if not authorization:
        return False
    scheme, _, given = authorization.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), expected.encode())
