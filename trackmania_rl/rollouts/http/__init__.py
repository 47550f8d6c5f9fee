"""External game clients over HTTP (issue 15): the third rollout source. Needs the `http` extra
(pip install -e ".[http]"); nothing outside this package imports it. API and wire format: docs/http-api.md."""
