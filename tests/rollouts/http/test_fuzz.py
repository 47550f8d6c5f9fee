"""Bad input, property-based (hypothesis), against one real server on 127.0.0.1: malformed msgpack, wrong
dtypes and shapes, NaN, oversized arrays, negative or future versions, unknown client ids, replayed and
truncated bodies, random JSON to the control routes. Each is answered 4xx, nothing is stored, the server
stays alive (it answers /v1/status), and the counters of refused races add up: each refusal adds exactly one to the
counter of its reason (its status code's) in /v1/status and nothing to the races received, and over the module the
counters sum to the refusals made."""

from __future__ import annotations

import copy
import json
import urllib.parse
from collections import Counter

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
# the refusal counter (/v1/status races_dropped) each status code of POST /v1/rollouts counts under
REASON_OF_STATUS = {400: "bad_request", 404: "unknown_client", 409: "repeated", 413: "too_large", 422: "invalid", 429: "queue_full"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    served = make_served(tmp_path_factory.mktemp("fuzz"))
    http = served.client()
    served.cid = http.register("fuzzer")
    served.http = http
    # one valid race as unpacked msgpack: the seed every mutation starts from
    served.valid = msgpack.unpackb(served.body(served.cid, seq=0), raw=False)
    served.refusals_made = Counter()  # by reason, as the tests expect them counted
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


def counters(server) -> tuple[dict, int]:
    """(refusals by reason, races received) as /v1/status gives them."""
    status, answer = server.http.json("GET", "/v1/status")
    assert status == 200
    return answer["races_dropped"], answer["races_received"]


def assert_refused_and_alive(server, status: int) -> None:
    assert 400 <= status < 500, status
    assert server.drain() == [], "a refused race was stored"
    counters(server)  # alive: it answers /v1/status


def post_refused(server, body: bytes) -> int:
    """POST a race that must be refused: 4xx, nothing stored, the server alive, and one more refusal counted under
    the reason of its status code, nothing else."""
    dropped_before, received_before = counters(server)
    status = post(server, body)
    assert_refused_and_alive(server, status)
    count_one_refusal(server, REASON_OF_STATUS[status], dropped_before)
    assert counters(server)[1] == received_before
    return status


def count_one_refusal(server, reason: str | None, dropped_before: dict) -> None:
    """Since `dropped_before`, exactly one refusal was counted, under `reason` (None: none was)."""
    dropped_after, _ = counters(server)
    changed = {r: dropped_after[r] - dropped_before[r] for r in dropped_after if dropped_after[r] != dropped_before[r]}
    assert changed == ({reason: 1} if reason else {}), (reason, changed)
    if reason:
        server.refusals_made[reason] += 1


def fresh(server) -> dict:
    body = copy.deepcopy(server.valid)
    server.seq += 1
    body["seq"] = 1_000_000 + server.seq  # new each time: only the mutation can make it fail
    return body


@FUZZ
@given(data=st.binary(max_size=2_000))
def test_random_bytes(server, data):
    post_refused(server, data)


@FUZZ
@given(cut=st.integers(min_value=0, max_value=10_000_000))
def test_truncated_bodies(server, cut):
    body = msgpack.packb(fresh(server), use_bin_type=True)
    assert post_refused(server, body[: cut % len(body)]) == 400


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
    status = post_refused(server, packed)
    # frames of 16-byte elements can outgrow the body cap: then refused for their size, before any decoding
    assert status == (413 if len(packed) > server.source.race_body_cap() else 422)


@FUZZ
@given(field=st.sampled_from(ARRAY_FIELDS), shape=st.lists(st.integers(min_value=0, max_value=70), min_size=0, max_size=5))
def test_wrong_shapes(server, field, shape):
    body = fresh(server)
    array = body["race"][field]
    if list(shape) == array["shape"]:
        return
    itemsize = np.dtype(array["dtype"]).itemsize
    array["shape"], array["data"] = shape, b"\x00" * (int(np.prod(shape)) * itemsize)
    post_refused(server, msgpack.packb(body, use_bin_type=True))


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
    assert post_refused(server, msgpack.packb(body, use_bin_type=True)) == 422


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
    assert post_refused(server, msgpack.packb(body, use_bin_type=True)) in (413, 422)


@FUZZ
@given(version=st.one_of(st.integers(max_value=-1, min_value=-(2**31)), st.integers(min_value=2, max_value=2**31 - 1)))
def test_negative_or_future_versions(server, version):
    body = fresh(server)
    array = body["race"]["policy_version"]
    values = np.frombuffer(array["data"], dtype=array["dtype"]).copy()
    values[-1] = version
    array["data"] = values.tobytes()
    assert post_refused(server, msgpack.packb(body, use_bin_type=True)) == 422


@FUZZ
@given(client_id=st.text(min_size=1, max_size=60))
def test_unknown_client_ids(server, client_id):
    body = fresh(server)
    body["client_id"] = client_id
    status = post_refused(server, msgpack.packb(body, use_bin_type=True))
    assert status == 404 or (status == 422 and not client_id)


def test_replayed_body(server):
    body = fresh(server)
    packed = msgpack.packb(body, use_bin_type=True)
    dropped_before, received_before = counters(server)
    assert post(server, packed) == 202
    assert len(server.drain()) == 1
    assert counters(server) == (dropped_before, received_before + 1)  # accepted: received, nothing refused
    assert post_refused(server, packed) == 409  # counted as "repeated"


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
    dropped_before, _ = counters(server)
    status, _ = server.http.request("POST", path, json.dumps(payload).encode(), "application/json")
    assert 400 <= status < 500
    assert server.source.clients.counts(1e9)[0] == before  # nobody registered, nobody removed
    assert_refused_and_alive(server, status)
    # an unknown client id is a refusal the counters keep; a malformed request to a control route is not a race
    count_one_refusal(server, "unknown_client" if status == 404 else None, dropped_before)


@FUZZ
@given(value=st.one_of(st.integers(min_value=-3, max_value=100).map(str), st.text(max_size=8)))
def test_policy_with_odd_versions(server, value):
    status, _ = server.http.request("GET", f"/v1/policy?have={urllib.parse.quote(value)}")
    assert status in (200, 304, 422)
    assert server.http.json("GET", "/v1/status")[0] == 200


def test_the_refusal_counters_add_up_over_the_module(server):
    """In any order, alone or after the others: this test makes refusals of two reasons itself (bytes that are no
    msgpack, 400; a replayed race, 409), and then every refusal made on the module's server (by this test and by
    whichever tests ran before it) is in /v1/status, under its reason, and nothing else is."""
    assert post_refused(server, b"\xc1 not msgpack") == 400  # 0xc1 is never used in msgpack
    packed = msgpack.packb(fresh(server), use_bin_type=True)
    assert post(server, packed) == 202
    assert len(server.drain()) == 1
    assert post_refused(server, packed) == 409
    assert server.refusals_made["bad_request"] >= 1 and server.refusals_made["repeated"] >= 1
    dropped, _ = counters(server)
    assert {reason: count for reason, count in dropped.items() if count} == dict(server.refusals_made)
