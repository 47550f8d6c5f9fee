"""The msgpack wire format: typed arrays, limits, and what is never decoded (ext types, object arrays)."""

from __future__ import annotations

import numpy as np
import pytest

msgpack = pytest.importorskip("msgpack")

from trackmania_rl.rollouts.http import wire  # noqa: E402

pytestmark = pytest.mark.http


@pytest.mark.parametrize(
    "array", [np.arange(12, dtype=np.float32).reshape(3, 4), np.array([True, False]), np.zeros((2, 1, 3, 3), np.uint8)]
)
def test_typed_array_round_trip(array):
    value = wire.unpack(wire.pack(wire.encode_array(array)), max_bin_len=1 << 20)
    decoded = wire.decode_array(value, "x")
    assert decoded.dtype == array.dtype and decoded.shape == array.shape and np.array_equal(decoded, array)
    decoded[...] = 0  # a writable copy, not a view of the body


def test_big_endian_goes_on_the_wire_little_endian():
    array = np.arange(3, dtype=">f4")
    value = wire.encode_array(array)
    assert value["dtype"] == "<f4" and np.array_equal(wire.decode_array(value, "x"), array)


@pytest.mark.parametrize(
    "value, message",
    [
        ({"dtype": "|O", "shape": [1], "data": b"\x00" * 8}, "not allowed"),
        ({"dtype": "<f4", "shape": [3], "data": b"\x00" * 8}, "data bytes"),
        ({"dtype": "<f4", "shape": [-1], "data": b""}, "shape"),
        ({"dtype": "<f4", "shape": [1, 1, 1, 1, 1], "data": b"\x00" * 4}, "shape"),
        ({"dtype": "<f4", "shape": [0, 2**64 - 1], "data": b""}, "shape"),  # no data, a dimension numpy refuses
        ({"dtype": "<f4", "shape": [1], "data": "text"}, "bin"),
        ({"dtype": "|b1", "shape": [1], "data": b"\x07"}, "0 or 1"),
        ({"dtype": "<f4", "shape": [1], "data": b"\x00" * 4, "extra": 1}, "typed array"),
        ([1, 2], "typed array"),
    ],
)
def test_bad_arrays_are_named(value, message):
    with pytest.raises(wire.WireError, match=message) as error:
        wire.decode_array(value, "race.frames")
    assert "race.frames" in str(error.value) and error.value.status == 422


def test_object_arrays_cannot_be_encoded():
    with pytest.raises(wire.WireError):
        wire.encode_array(np.array([object()], dtype=object))


@pytest.mark.parametrize(
    "body",
    [
        msgpack.packb(msgpack.ExtType(1, b"payload")),  # msgpack-numpy and friends use ext types
        b"\x81\xa1a\xd6\xff\x00\x00\x00\x00",  # {"a": a timestamp (ext type -1)}
        b"\x91" * 5000 + b"\xc0",  # nesting far deeper than any body needs
        msgpack.packb({str(i): i for i in range(wire.MAX_MAP_LEN + 1)}),
        msgpack.packb(list(range(wire.MAX_ARRAY_LEN + 1))),
        msgpack.packb("x" * (wire.MAX_STR_LEN + 1)),
        msgpack.packb({1: 2}),  # non-string map keys
        msgpack.packb(b"\x00" * 101),  # a bin over the cap given
        msgpack.packb(1) + b"\x00",  # trailing bytes
    ],
)
def test_unpack_refuses_what_is_not_plain_bounded_msgpack(body):
    with pytest.raises(wire.WireError) as error:
        wire.unpack(body, max_bin_len=100)
    assert error.value.status == 400


def one_state_race() -> dict:
    return {
        "frames": [np.zeros((1, 2, 2), np.uint8)],
        "state_float": [np.zeros(3, np.float32)],
        "current_zone_idx": [0],
        "meters_advanced_along_centerline": [0.0],
        "car_gear_and_wheels": [np.zeros(4, np.float32)],
        "actions": [1],
        "action_was_greedy": [True],
        "q_values": [np.zeros(2, np.float32)],
        "input_w": [True],
        "policy_version": [0],
        "furthest_zone_idx": 0,
    }


def test_stats_and_meta_take_plain_values_only():
    fields = wire.race_fields((1, 2, 2), 3, 2)
    race = one_state_race()
    body = wire.unpack(wire.encode_race("c", 0, race, {"native_score": 1.5, "cp": [1, 2]}, {"map_name": "m"}, fields), 1 << 20)
    decoded = wire.decode_race(body, fields, max_states=10)
    assert decoded.rollout_results["actions"] == [1] and decoded.end_race_stats["cp"] == [1, 2]
    for stats in ({"x": float("nan")}, {"x": {"nested": 1}}, {"x": [1, "a"]}):
        body["end_race_stats"] = stats
        with pytest.raises(wire.WireError, match="end_race_stats.x"):
            wire.decode_race(body, fields, max_states=10)


@pytest.mark.parametrize("key", ["road_tiles_touched", "road_tiles_missed"])
def test_the_road_tile_counts_are_optional_and_checked_when_sent(key):
    fields = wire.race_fields((1, 2, 2), 3, 2)
    race = one_state_race()
    decoded = wire.decode_race(wire.unpack(wire.encode_race("c", 0, race, {}, {}, fields), 1 << 20), fields, max_states=10)
    assert key not in decoded.rollout_results  # a game without tiles sends none
    race[key] = [np.int64(4)]
    body = wire.unpack(wire.encode_race("c", 0, race, {}, {}, fields), 1 << 20)
    assert body["race"][key]["dtype"] == "<i8"
    decoded = wire.decode_race(body, fields, max_states=10).rollout_results[key]
    assert decoded == [4] and type(decoded[0]) is int
    body["race"][key] = wire.encode_array(np.array([4.0], np.float32))
    with pytest.raises(wire.WireError, match=f"{key}.*not allowed"):
        wire.decode_race(body, fields, max_states=10)
    body["race"][key] = wire.encode_array(np.array([4, 5], np.int64))
    with pytest.raises(wire.WireError, match=f"{key}` has 2 steps"):
        wire.decode_race(body, fields, max_states=10)
