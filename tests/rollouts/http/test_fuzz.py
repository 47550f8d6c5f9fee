"""Bad input, property-based (hypothesis), against one real server on 127.0.0.1: malformed msgpack, wrong
dtypes and shapes, NaN, oversized arrays, negative or future versions, unknown client ids, replayed and
truncated bodies, random JSON to the control routes. Each is answered 4xx, nothing is stored, the server
stays alive (it answers /v1/status), and the counters of refused races add up."""

from __future__ import annotations

import copy
import json
import urllib.parse

import numpy as np
import pytest

pytest.importorskip("fastapi")
msgpack = pytest.importorskip("msgpack")
pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.rollouts.http.support import make_served  # noqa: E402

pytestmark = pytest.mark.http

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
ARRAY_FIELDS = (
    "frames",
    "state_float",
    "current_zone_idx",
    "meters_advanced_along_centerline",
    "car_gear_and_wheels",
    "actions",
    "action_was_greedy",
    "q_values",
    "input_w",
    "policy_version",
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    served = make_served(tmp_path_factory.mktemp("fuzz"))
    http = served.client()
    served.cid = http.register("fuzzer")
    served.http = http
    # one valid race as unpacked msgpack: the seed every mutation starts from
    served.valid = msgpack.unpackb(served.body(served.cid, seq=0), raw=False)
    yield served
    served.source.stop()


def post(server, body: bytes) -> int:
    try:
        return server.http.request("POST", "/v1/rollouts", body, "application/msgpack")[0]
    except (ConnectionResetError, BrokenPipeError):
        # A body over the cap is refused from its Content-Length and the connection closed without reading the
        # rest: a client still sending may see the reset before the 413. Only over-cap bodies may end so.
        assert len(body) > server.source.race_body_cap(), "connection reset for a body within the cap"
        server.http = server.client()
        return 413


def assert_refused_and_alive(server, status: int) -> None:
    assert 400 <= status < 500, status
    assert server.drain() == [], "a refused race was stored"
    assert server.http.json("GET", "/v1/status")[0] == 200


def fresh(server) -> dict:
    body = copy.deepcopy(server.valid)
    server.seq += 1
    body["seq"] = 1_000_000 + server.seq  # new each time: only the mutation can make it fail
    return body


@FUZZ
@given(data=st.binary(max_size=2_000))
def test_random_bytes(server, data):
    assert_refused_and_alive(server, post(server, data))


@FUZZ
@given(cut=st.integers(min_value=0, max_value=10_000_000))
def test_truncated_bodies(server, cut):
    body = msgpack.packb(fresh(server), use_bin_type=True)
    status = post(server, body[: cut % len(body)])
    assert status == 400
    assert_refused_and_alive(server, status)


@FUZZ
@given(
    field=st.sampled_from(ARRAY_FIELDS),
    dtype=st.sampled_from(["|u1", "|b1", "<i4", "<i8", "<f4", "<f8", ">f4", "<f2", "|O", "<U4", "<c8", "|V8"]),
)
def test_wrong_dtypes(server, field, dtype):
    body = fresh(server)
    array = body["race"][field]
    if dtype in server.fields[field].dtypes:
        return  # an allowed dtype for that field
    itemsize = {"|u1": 1, "|b1": 1, "<i4": 4, "<i8": 8, "<f4": 4, "<f8": 8, ">f4": 4, "<f2": 2, "|O": 8, "<U4": 16, "<c8": 8, "|V8": 8}[
        dtype
    ]
    count = int(np.prod(array["shape"]))
    array["dtype"], array["data"] = dtype, b"\x01" * (count * itemsize)
    packed = msgpack.packb(body, use_bin_type=True)
    status = post(server, packed)
    # frames of 16-byte elements can outgrow the body cap: then refused for their size, before any decoding
    assert status == (413 if len(packed) > server.source.race_body_cap() else 422)
    assert_refused_and_alive(server, status)


@FUZZ
@given(field=st.sampled_from(ARRAY_FIELDS), shape=st.lists(st.integers(min_value=0, max_value=70), min_size=0, max_size=5))
def test_wrong_shapes(server, field, shape):
    body = fresh(server)
    array = body["race"][field]
    if list(shape) == array["shape"]:
        return
    itemsize = np.dtype(array["dtype"]).itemsize
    array["shape"], array["data"] = shape, b"\x00" * (int(np.prod(shape)) * itemsize)
    assert_refused_and_alive(server, post(server, msgpack.packb(body, use_bin_type=True)))


@FUZZ
@given(
    field=st.sampled_from(("state_float", "q_values", "meters_advanced_along_centerline")),
    value=st.sampled_from([np.nan, np.inf, -np.inf]),
    where=st.integers(0, 10_000),
)
def test_nan_and_inf(server, field, value, where):
    body = fresh(server)
    array = body["race"][field]
    values = np.frombuffer(array["data"], dtype=array["dtype"]).copy()
    values[where % values.size] = value
    array["data"] = values.tobytes()
    status = post(server, msgpack.packb(body, use_bin_type=True))
    assert status == 422
    assert_refused_and_alive(server, status)


@FUZZ
@given(steps=st.integers(min_value=30, max_value=400))
def test_oversized_arrays(server, steps):
    """More steps than the longest race: over the body cap (413) or over the step count (422)."""
    body = fresh(server)
    for field in ARRAY_FIELDS:
        array = body["race"][field]
        per_step = int(np.prod(array["shape"][1:])) * np.dtype(array["dtype"]).itemsize
        array["shape"] = [steps, *array["shape"][1:]]
        array["data"] = b"\x00" * (steps * per_step)
    status = post(server, msgpack.packb(body, use_bin_type=True))
    assert status in (413, 422)
    assert_refused_and_alive(server, status)


@FUZZ
@given(version=st.one_of(st.integers(max_value=-1, min_value=-(2**31)), st.integers(min_value=2, max_value=2**31 - 1)))
def test_negative_or_future_versions(server, version):
    body = fresh(server)
    array = body["race"]["policy_version"]
    values = np.frombuffer(array["data"], dtype=array["dtype"]).copy()
    values[-1] = version
    array["data"] = values.tobytes()
    status = post(server, msgpack.packb(body, use_bin_type=True))
    assert status == 422
    assert_refused_and_alive(server, status)


@FUZZ
@given(client_id=st.text(min_size=1, max_size=60))
def test_unknown_client_ids(server, client_id):
    body = fresh(server)
    body["client_id"] = client_id
    status = post(server, msgpack.packb(body, use_bin_type=True))
    assert status == 404 or (status == 422 and not client_id)
    assert_refused_and_alive(server, status)


def test_replayed_body(server):
    body = fresh(server)
    packed = msgpack.packb(body, use_bin_type=True)
    assert post(server, packed) == 202
    assert len(server.drain()) == 1
    assert_refused_and_alive(server, post(server, packed))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


@FUZZ
@given(
    path=st.sampled_from(["/v1/register", "/v1/heartbeat", "/v1/disconnect"]),
    payload=st.one_of(
        json_values,
        st.fixed_dictionaries({"name": json_values, "game": json_values, "protocol_version": json_values}),
        st.fixed_dictionaries({"client_id": json_values}),
    ),
)
def test_control_routes_with_random_json(server, path, payload):
    before = server.source.clients.counts(1e9)[0]
    status, _ = server.http.request("POST", path, json.dumps(payload).encode(), "application/json")
    assert 400 <= status < 500
    assert server.source.clients.counts(1e9)[0] == before  # nobody registered, nobody removed
    assert_refused_and_alive(server, status)


@FUZZ
@given(value=st.one_of(st.integers(min_value=-3, max_value=100).map(str), st.text(max_size=8)))
def test_policy_with_odd_versions(server, value):
    status, _ = server.http.request("GET", f"/v1/policy?have={urllib.parse.quote(value)}")
    assert status in (200, 304, 422)
    assert server.http.json("GET", "/v1/status")[0] == 200
