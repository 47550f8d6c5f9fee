"""The HTTP API v1 (docs/http-api.md) as a FastAPI app, and uvicorn serving it from a learner thread.

The app only speaks HTTP: it authenticates, reads bodies under a byte cap counted as they arrive
(uvicorn has no cap of its own; a chunked body has no Content-Length to check up front), and hands the
bytes to the hub (source.HttpSource), which decodes, checks and queues; ApiError carries the status back.
uvicorn runs in a daemon thread on a socket bound here, without signal handlers: Ctrl-C and SIGTERM stay
the learner's, which stops the server through `UvicornThread.stop`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import threading
import time

import uvicorn
from fastapi import FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, ValidationError

from trackmania_rl.rollouts.http.token import token_matches

API_VERSION = 1
CONTROL_BODY_CAP = 64 * 1024  # register, heartbeat, disconnect: small JSON
MSGPACK = "application/msgpack"
POLICY_FORMATS = ("arrays", "onnx")  # GET /v1/policy?format=
MAX_CONNECTIONS = 64  # uvicorn answers 503 beyond: bodies in flight stay bounded (connections x cap)
BODY_TIMEOUT_S = 60.0  # a body must arrive whole within this (a 4.4 MB race at 100 kB/s): a stalled client frees its slot


class ApiError(Exception):
    def __init__(self, status: int, detail: str, headers: dict | None = None):
        super().__init__(detail)
        self.status, self.detail, self.headers = status, detail, headers or {}


# ---------------------------------------------------------------------------------------- JSON bodies
class RegisterRequest(BaseModel):
    name: str = Field(min_length=1, max_length=100, description="the client's own name, for logs")
    game: str = Field(min_length=1, max_length=100, description="the game it plays: the run's (`carracing`, `gymnasium`, `supertuxkart`)")
    protocol_version: int = Field(description=f"the API version the client speaks: {API_VERSION}")


class ClientRequest(BaseModel):
    client_id: str = Field(min_length=1, max_length=100)


def _schema(model) -> dict:
    return {"content": {"application/json": {"schema": model.model_json_schema()}}, "required": True}


ERRORS = {
    400: {"description": "the body is not JSON / msgpack within the limits"},
    401: {"description": "no bearer token, or a wrong one"},
    408: {"description": "the body did not arrive whole within the time allowed"},
    413: {"description": "the body is larger than the cap"},
    422: {"description": "a field breaks the contract; `detail` names it"},
}
RACE_BODY = {
    "content": {
        MSGPACK: {
            "schema": {
                "type": "string",
                "format": "binary",
                "description": (
                    "msgpack map {client_id: str, seq: int >= 0, race: map, end_race_stats: map, meta: map}. race holds typed "
                    "arrays {dtype: str, shape: [int], data: bin} per step: frames |u1 [F,C,H,W]; state_float <f4 [F,D]; "
                    "actions <i4|<i8|u1 [A]; action_was_greedy |b1 [A]; q_values <f4 [A,n_actions]; input_w |b1 [A]; "
                    "policy_version <i4|<i8 [A]; and race_time: int (ms, only when the race ended in a terminal state; then "
                    "A = F - 1, else A = F). By game (GET /v1/contract `race_fields` says which this run's game requires): "
                    "a game with a centerline (carracing, supertuxkart) current_zone_idx <i4|<i8 [F], meters_advanced_along_centerline "
                    "<f4|<f8 [F], car_gear_and_wheels <f4 [F,C] and furthest_zone_idx: int; road_tiles_touched and "
                    "road_tiles_missed <i4|<i8 [F] where the game has road tiles; game_reward <f4|<f8 [A], the game's own "
                    "reward of each action (gymnasium). Byte-level format: docs/http-api.md."
                ),
            }
        }
    },
    "required": True,
}


# ---------------------------------------------------------------------------------------------- app
def build_app(hub, token: str) -> FastAPI:
    """The API v1 over `hub` (an HttpSource): every /v1 route needs `Authorization: Bearer <token>`."""
    app = FastAPI(
        title="trackmania_rl rollout API",
        version=str(API_VERSION),
        description="External game clients: register, pull weights by version, push races, poll status. See docs/http-api.md.",
        docs_url=None,  # the interactive pages load scripts from a CDN: only the schema is served
        redoc_url=None,
        openapi_url="/openapi.json",
    )

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, error: ApiError):
        return JSONResponse({"detail": error.detail}, status_code=error.status, headers=error.headers)

    def authorize(request: Request) -> None:
        if not token_matches(token, request.headers.get("authorization")):
            hub.count_refusal("unauthorized")
            detail = "missing or wrong bearer token (Authorization: Bearer <the run's save/<run>/http_token>)"
            raise ApiError(401, detail, {"WWW-Authenticate": "Bearer"})

    async def json_body(request: Request, model):
        body = await read_capped(request, CONTROL_BODY_CAP, hub)
        try:
            return model.model_validate_json(body)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "body"
            status = 400 if first.get("type") == "json_invalid" else 422
            raise ApiError(status, f"`{where}`: {first.get('msg')}") from None

    register_errors = {**ERRORS, 429: {"description": "too many clients"}}

    @app.post("/v1/register", openapi_extra={"requestBody": _schema(RegisterRequest)}, responses=register_errors)
    async def register(request: Request):
        """Register a client: its id, the run, the policy version and the contract its races must follow."""
        authorize(request)
        body = await json_body(request, RegisterRequest)
        return hub.register(body.name, body.game, body.protocol_version)

    @app.get(
        "/v1/policy",
        responses={
            200: {
                "content": {MSGPACK: {"schema": {"type": "string", "format": "binary"}}},
                "description": "msgpack {version, arrays} (format=arrays), or {version, onnx, sidecar} (format=onnx)",
            },
            304: {"description": "`have` is the current version"},
            401: ERRORS[401],
            422: {"description": "`have` is not an integer, or `format` is not one of " + ", ".join(POLICY_FORMATS)},
            501: {"description": "format=onnx: the learner has no onnx extra"},
            503: {"description": "no weights published yet"},
        },
    )
    async def policy(request: Request, have: int = -1, policy_format: str = Query("arrays", alias="format")):
        """The current weights as msgpack named arrays (format=arrays) or as an ONNX model with its sidecar
        (format=onnx), or 304 when `have` is the current version."""
        authorize(request)
        if policy_format not in POLICY_FORMATS:
            raise ApiError(422, f"`format` {policy_format[:40]!r} is not served: give one of {', '.join(POLICY_FORMATS)}")
        if policy_format == "onnx":  # made from the weights when first asked for: off the event loop
            version, body = await run_in_threadpool(hub.onnx_policy_body, have)
        else:
            version, body = hub.policy_body(have)
        headers = {"X-Policy-Version": str(version)}
        if body is None and have == version:
            return Response(status_code=304, headers=headers)
        if body is None:
            raise ApiError(503, "no weights published yet: retry shortly", {"Retry-After": "1"})
        return Response(body, media_type=MSGPACK, headers=headers)

    @app.post(
        "/v1/rollouts",
        status_code=202,
        openapi_extra={"requestBody": RACE_BODY},
        responses={
            **ERRORS,
            404: {"description": "unknown client id: register again"},
            409: {"description": "too stale, or a sequence number already accepted"},
            429: {"description": "the queue is full: retry after backing off"},
        },
    )
    async def rollouts(request: Request):
        """One race. 202: queued, with the queue size and whether to pause."""
        authorize(request)
        body = await read_capped(request, hub.race_body_cap(), hub)
        return JSONResponse(hub.submit(body), status_code=202)

    @app.get("/v1/status", responses={401: ERRORS[401]})
    async def status(request: Request):
        """Policy version, queue size, learner step, races received and dropped, and `paused`."""
        authorize(request)
        return hub.status()

    client_errors = {**ERRORS, 404: {"description": "unknown client id: register again"}}

    @app.post("/v1/heartbeat", openapi_extra={"requestBody": _schema(ClientRequest)}, responses=client_errors)
    async def heartbeat(request: Request):
        """A sign of life between races; answers like /v1/status."""
        authorize(request)
        body = await json_body(request, ClientRequest)
        return hub.heartbeat(body.client_id)

    @app.post("/v1/disconnect", openapi_extra={"requestBody": _schema(ClientRequest)}, responses=client_errors)
    async def disconnect(request: Request):
        """The client leaves: forgotten at once."""
        authorize(request)
        body = await json_body(request, ClientRequest)
        return hub.disconnect(body.client_id)

    return app


async def read_capped(request: Request, cap: int, hub) -> bytes:
    """The body, refused with 413 as soon as it is known to exceed `cap` bytes: from Content-Length when
    given, else (chunked) by counting the bytes as they arrive; nothing beyond the cap is kept."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > cap):
        hub.count_refusal("too_large")
        raise ApiError(413, f"the body is larger than the cap of {cap} bytes", {"Connection": "close"})
    chunks, size = [], 0
    try:
        async with asyncio.timeout(BODY_TIMEOUT_S):
            async for chunk in request.stream():
                size += len(chunk)
                if size > cap:
                    hub.count_refusal("too_large")
                    raise ApiError(413, f"the body is larger than the cap of {cap} bytes", {"Connection": "close"})
                chunks.append(chunk)
    except TimeoutError:
        hub.count_refusal("bad_request")
        raise ApiError(408, f"the body did not arrive within {BODY_TIMEOUT_S:g} s ({size} bytes came)", {"Connection": "close"}) from None
    return b"".join(chunks)


# ------------------------------------------------------------------------------------------ serving
def parse_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f'http_listen {listen!r}: give "HOST:PORT", for example "127.0.0.1:8642"')
    return host, int(port)


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on exactly `host:port` (port 0: any free port); OSError when it cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # No Nagle on the connections (Linux: accepted sockets inherit it): uvicorn writes an answer's head and
        # body separately, and the body otherwise waits for the client's delayed ACK (measured: ~45 ms per race)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.set_inheritable(False)
    except BaseException:
        sock.close()
        raise
    return sock


class _ThreadServer(uvicorn.Server):
    """uvicorn without signal handlers: the learner owns SIGINT/SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield


class UvicornThread:
    """`app` served on `sock` by uvicorn in a daemon thread."""

    def __init__(self, app, sock: socket.socket):
        self.sock = sock
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            limit_concurrency=MAX_CONNECTIONS,
            timeout_keep_alive=30,
            timeout_graceful_shutdown=2,
            server_header=False,
        )
        self.server = _ThreadServer(config)
        self.thread = threading.Thread(target=self._run, name="http-source", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            asyncio.run(self.server.serve(sockets=[self.sock]))
        except BaseException as e:  # SystemExit from a failed start-up included: reported, never raised in the learner
            self.error = e

    def start(self, timeout_s: float = 10.0) -> None:
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started and self.thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self.server.started:
            raise RuntimeError(f"the HTTP server did not start: {self.error!r}")

    def stop(self, timeout_s: float = 5.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout_s)
        if self.thread.is_alive():
            self.server.force_exit = True
            self.thread.join(timeout_s)
        with contextlib.suppress(OSError):
            self.sock.close()
