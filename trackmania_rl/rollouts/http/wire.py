"""The msgpack wire format of the HTTP API (docs/http-api.md §3): races and weights as typed arrays.

A typed array is a msgpack map of exactly three entries, `{"dtype": str, "shape": [int, ...], "data": bin}`:
`dtype` one of ARRAY_DTYPES (numpy's little-endian type strings), `shape` its dimensions, `data` the
C-ordered bytes, exactly prod(shape) x itemsize of them. Nothing else is decoded: no ext types (msgpack-numpy,
timestamps), no pickles, no object arrays; every length is capped while decoding (msgpack's max_*_len), so a
body cannot make the decoder allocate more than the body cap. Everything here raises WireError naming the
field; the server answers it with 400 (not msgpack) or 422 (msgpack, but not a valid race).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import msgpack
import numpy as np

from trackmania_rl.games.base import CENTERLINE_RACE_KEYS, GAME_REWARD, ROAD_TILE_COUNTS, ROAD_TILES_MISSED, ROAD_TILES_TOUCHED
from trackmania_rl.rollouts.contract import FURTHEST_ZONE, POLICY_VERSION, RACE_TIME

# numpy type strings allowed on the wire: no object, no big-endian, no strings, no datetimes
ARRAY_DTYPES = ("|u1", "|b1", "<i4", "<i8", "<f4", "<f8")
ARRAY_KEYS = frozenset(("dtype", "shape", "data"))
MAX_NDIM = 4
MAX_DIM = 2**31 - 1  # one dimension of a typed array (numpy refuses far larger ones, even with no data)
MAX_FREE_DIM = 64  # a per-step dimension the run leaves free (car_gear_and_wheels' C)
MAX_STR_LEN = 1_024  # names, dtypes, meta strings
MAX_ARRAY_LEN = 4_096  # msgpack array entries: shapes, cp_time lists
MAX_MAP_LEN = 256  # msgpack map entries: race fields, stats, weight tensors
MAX_STATS_LIST = 4_096


class WireError(ValueError):
    """A body that breaks the wire format; `status` is the HTTP answer (400 not msgpack, 422 not a valid race)."""

    def __init__(self, message: str, status: int = 422):
        super().__init__(message)
        self.status = status


class FieldSpec(NamedTuple):
    """A per-step field of a race: allowed dtypes, and its shape after the step count (None: any size)."""

    dtypes: tuple
    per_step: tuple  # shape of one step, filled from the run's RolloutShape (see race_fields)
    per_state: bool  # one entry per state (F) or per action (A)
    nan_allowed: bool = False
    optional: bool = False  # a game may leave it out


def race_fields(frame_shape: tuple, float_dim: int, n_actions: int, race_keys: tuple = CENTERLINE_RACE_KEYS) -> dict[str, FieldSpec]:
    """What each per-step field of a race must be for a run with this rollout shape. `race_keys`: the optional keys
    the run's game carries (GameBackend.race_keys), required of its clients; road tiles stay optional (the reward terms
    that need them are checked after decoding)."""
    ints, floats = ("<i4", "<i8"), ("<f4", "<f8")
    centerline = "current_zone_idx" not in race_keys  # optional when the game has no centerline
    return {
        "frames": FieldSpec(("|u1",), tuple(frame_shape), True),
        "state_float": FieldSpec(("<f4",), (float_dim,), True),
        "current_zone_idx": FieldSpec(ints, (), True, optional=centerline),
        "meters_advanced_along_centerline": FieldSpec(floats, (), True, optional=centerline),
        "car_gear_and_wheels": FieldSpec(("<f4",), (None,), True, nan_allowed=True, optional=centerline),
        "actions": FieldSpec(ints + ("|u1",), (), False),
        "action_was_greedy": FieldSpec(("|b1",), (), False),
        "q_values": FieldSpec(("<f4",), (n_actions,), False),
        "input_w": FieldSpec(("|b1",), (), False),
        POLICY_VERSION: FieldSpec(ints, (), False),
        ROAD_TILES_TOUCHED: FieldSpec(ints, (), True, optional=True),
        ROAD_TILES_MISSED: FieldSpec(ints, (), True, optional=True),
        GAME_REWARD: FieldSpec(floats, (), False, optional=GAME_REWARD not in race_keys),
    }


def fields_in_words(fields: dict[str, FieldSpec]) -> dict[str, str]:
    """Each field of a race, "required" or "optional", for the contract a client reads (GET /v1/contract)."""
    words = {name: "optional" if spec.optional else "required" for name, spec in fields.items()}
    words[FURTHEST_ZONE] = words["current_zone_idx"]
    words[RACE_TIME] = "only when finished"
    return words


# ------------------------------------------------------------------------------------------- arrays
def encode_array(array: np.ndarray) -> dict:
    array = np.ascontiguousarray(array)
    if array.dtype == np.bool_:
        dtype = "|b1"
    else:
        dtype = array.dtype.newbyteorder("<").str if array.dtype.byteorder == ">" else array.dtype.str
        array = array.astype(dtype, copy=False)
    if dtype not in ARRAY_DTYPES:
        raise WireError(f"dtype {array.dtype} cannot go on the wire (allowed: {', '.join(ARRAY_DTYPES)})")
    return {"dtype": dtype, "shape": list(array.shape), "data": array.tobytes()}


def decode_array(value, field: str, dtypes: tuple = ARRAY_DTYPES) -> np.ndarray:
    """A typed array from its wire map: dtype in `dtypes`, byte count matching the shape. A writable copy."""
    if not isinstance(value, dict) or set(value) != ARRAY_KEYS:
        raise WireError(f"`{field}` must be a typed array {{dtype, shape, data}}, got {_kind(value)}")
    dtype, shape, data = value["dtype"], value["shape"], value["data"]
    if dtype not in dtypes:
        raise WireError(f"`{field}`: dtype {dtype!r} is not allowed here (allowed: {', '.join(dtypes)})")
    if not isinstance(shape, list) or len(shape) > MAX_NDIM or not all(_is_int(d) and 0 <= d <= MAX_DIM for d in shape):
        raise WireError(f"`{field}`: shape must be a list of at most {MAX_NDIM} integers from 0 to {MAX_DIM}, got {shape!r}")
    if not isinstance(data, bytes):
        raise WireError(f"`{field}`: data must be msgpack bin, got {_kind(data)}")
    itemsize = np.dtype(dtype).itemsize
    if len(data) != math.prod(shape) * itemsize:
        raise WireError(f"`{field}`: {len(data)} data bytes for shape {shape} of {dtype} ({math.prod(shape) * itemsize} expected)")
    array = np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    if dtype == "|b1" and array.size and array.view(np.uint8).max() > 1:
        raise WireError(f"`{field}`: booleans must be bytes 0 or 1")
    return array


# -------------------------------------------------------------------------------------------- bodies
def unpack(body: bytes, max_bin_len: int):
    """msgpack -> Python values, with every length capped; WireError(400) for anything not plain msgpack."""
    try:
        return msgpack.unpackb(
            body,
            raw=False,
            strict_map_key=True,
            use_list=True,
            max_bin_len=max_bin_len,
            max_str_len=MAX_STR_LEN,
            max_array_len=MAX_ARRAY_LEN,
            max_map_len=MAX_MAP_LEN,
            max_ext_len=0,
        )
    except Exception as e:  # ExtraData, FormatError, StackError, ValueError (limits, bad UTF-8), ...
        raise WireError(f"the body is not valid msgpack within the limits: {type(e).__name__}: {e}", status=400) from None


def pack(value) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def encode_race(client_id: str, seq: int, rollout_results: dict, end_race_stats: dict, meta: dict, fields: dict) -> bytes:
    """A race as the POST /v1/rollouts body (the reference client's side)."""
    race = {}
    for name, spec in fields.items():
        if spec.optional and name not in rollout_results:
            continue
        values = rollout_results[name]
        array = np.asarray(values) if len(values) else np.zeros((0, *[0 if d is None else d for d in spec.per_step]))
        if name == "state_float":
            array = array.astype(np.float32, copy=False)
        elif name in ("current_zone_idx", "actions", POLICY_VERSION, *ROAD_TILE_COUNTS):
            array = array.astype(np.int64, copy=False)
        elif name == "frames":
            array = array.astype(np.uint8, copy=False)
        elif name in ("action_was_greedy", "input_w"):
            array = array.astype(np.bool_, copy=False)
        elif name in ("meters_advanced_along_centerline", GAME_REWARD):
            array = array.astype(np.float64, copy=False)
        else:
            array = array.astype(np.float32, copy=False)
        race[name] = encode_array(array)
    if FURTHEST_ZONE in rollout_results:
        race[FURTHEST_ZONE] = int(rollout_results[FURTHEST_ZONE])
    if RACE_TIME in rollout_results:
        race[RACE_TIME] = int(rollout_results[RACE_TIME])
    return pack({"client_id": client_id, "seq": int(seq), "race": race, "end_race_stats": plain(end_race_stats), "meta": plain(meta)})


def plain(mapping: dict) -> dict:
    """A dict of JSON-like values: numpy scalars made Python numbers, anything else dropped (client side)."""
    out = {}
    for key, value in mapping.items():
        if isinstance(value, (np.generic,)):
            value = value.item()
        if isinstance(value, (list, tuple)):
            value = [v.item() if isinstance(v, np.generic) else v for v in value]
            if all(_is_number(v) for v in value):
                out[str(key)] = value
        elif value is None or isinstance(value, (str, bool, int, float)):
            out[str(key)] = value
    return out


class DecodedRace(NamedTuple):
    client_id: str
    seq: int
    rollout_results: dict
    end_race_stats: dict
    meta: dict


def decode_race_header(body) -> tuple[str, int]:
    """The client id and sequence number of an unpacked body (checked before the arrays are)."""
    if not isinstance(body, dict):
        raise WireError(f"the body must be a msgpack map, got {_kind(body)}")
    missing = [k for k in ("client_id", "seq", "race") if k not in body]
    if missing:
        raise WireError(f"the body lacks `{missing[0]}`")
    unknown = sorted(set(body) - {"client_id", "seq", "race", "end_race_stats", "meta"})
    if unknown:
        raise WireError(f"unknown body field `{unknown[0]}`")
    client_id, seq = body["client_id"], body["seq"]
    if not isinstance(client_id, str) or not client_id:
        raise WireError(f"`client_id` must be a non-empty string, got {_kind(client_id)}")
    if not _is_int(seq) or seq < 0:
        raise WireError(f"`seq` must be an integer >= 0, got {seq!r}")
    return client_id, seq


def decode_race(body: dict, fields: dict[str, FieldSpec], max_states: int) -> DecodedRace:
    """An unpacked POST /v1/rollouts body as the per-step lists of the contract (rollouts/contract.py)."""
    client_id, seq = decode_race_header(body)
    race = body["race"]
    if not isinstance(race, dict):
        raise WireError(f"`race` must be a map, got {_kind(race)}")
    unknown = sorted(set(race) - set(fields) - {FURTHEST_ZONE, RACE_TIME})
    if unknown:
        raise WireError(f"unknown field `race.{unknown[0]}`")
    finished = RACE_TIME in race
    rollout_results: dict = {}
    n_states = n_actions = None
    for name, spec in fields.items():
        if name not in race:
            if spec.optional:
                continue
            raise WireError(f"`race.{name}` is missing")
        array = decode_array(race[name], f"race.{name}", spec.dtypes)
        fits = array.ndim == 1 + len(spec.per_step) and all(
            n <= MAX_FREE_DIM if d is None else d == n for d, n in zip(spec.per_step, array.shape[1:], strict=True)
        )
        if not fits:
            want = ["steps", *(f"at most {MAX_FREE_DIM}" if d is None else d for d in spec.per_step)]
            raise WireError(f"`race.{name}`: shape {list(array.shape)} does not fit {want}")
        count = array.shape[0]
        if spec.per_state:
            n_states = count if n_states is None else n_states
            if count != n_states:
                raise WireError(f"`race.{name}` has {count} steps but `race.frames` has {n_states}")
        else:
            n_actions = count if n_actions is None else n_actions
            if count != n_actions:
                raise WireError(f"`race.{name}` has {count} steps but `race.actions` has {n_actions}")
        if not spec.nan_allowed and array.dtype.kind == "f" and not np.all(np.isfinite(array)):
            raise WireError(f"`race.{name}` contains NaN or inf")
        if count > max_states:
            raise WireError(f"`race.{name}` has {count} steps: more than the longest race allows ({max_states})")
        rollout_results[name] = _steps(array, name)
    if "current_zone_idx" in rollout_results or FURTHEST_ZONE in race:  # a race along a centerline
        furthest = race.get(FURTHEST_ZONE)
        if not _is_int(furthest) or furthest < 0:
            raise WireError(f"`race.{FURTHEST_ZONE}` must be an integer >= 0, got {furthest!r}")
        rollout_results[FURTHEST_ZONE] = furthest
    if finished:
        if not _is_int(race[RACE_TIME]) or race[RACE_TIME] <= 0:
            raise WireError(f"`race.{RACE_TIME}` must be a positive integer of ms, got {race[RACE_TIME]!r}")
        rollout_results[RACE_TIME] = race[RACE_TIME]
    end_race_stats = _scalars(body.get("end_race_stats", {}), "end_race_stats", lists=True)
    meta = _scalars(body.get("meta", {}), "meta", lists=False)
    return DecodedRace(client_id, seq, rollout_results, end_race_stats, meta)


def _steps(array: np.ndarray, name: str) -> list:
    """Per-step list as the game instance gives it: arrays per step, Python scalars for scalar fields."""
    if array.ndim > 1:
        return list(array)
    return array.tolist()


def _scalars(value, field: str, lists: bool) -> dict:
    """A map of string keys to JSON-like scalars (and, for stats, lists of numbers); NaN refused."""
    if not isinstance(value, dict):
        raise WireError(f"`{field}` must be a map, got {_kind(value)}")
    for key, item in value.items():
        if isinstance(item, list) and lists:
            if len(item) > MAX_STATS_LIST or not all(_is_number(v) and _finite(v) for v in item):
                raise WireError(f"`{field}.{key}` must be a list of finite numbers")
        elif not (item is None or isinstance(item, (str, bool)) or (_is_number(item) and _finite(item))):
            raise WireError(f"`{field}.{key}` must be a string, a boolean, a finite number or nil, got {_kind(item)}")
    return dict(value)


# ------------------------------------------------------------------------------------------- weights
def encode_weights(version: int, arrays: dict[str, np.ndarray]) -> bytes:
    return pack({"version": int(version), "arrays": {name: encode_array(a) for name, a in arrays.items()}})


def decode_weights(body: bytes, max_bin_len: int) -> tuple[int, dict[str, np.ndarray]]:
    """The GET /v1/policy body (the client's side): version and named arrays."""
    value = unpack(body, max_bin_len)
    if not isinstance(value, dict) or set(value) != {"version", "arrays"}:
        raise WireError("a policy body is a map {version, arrays}")
    version, arrays = value["version"], value["arrays"]
    if not _is_int(version) or version < 0 or not isinstance(arrays, dict):
        raise WireError("a policy body needs an integer version >= 0 and a map of arrays")
    return version, {name: decode_array(a, f"arrays.{name}", ("<f4", "<f8", "<i8", "<i4")) for name, a in arrays.items()}


# ----------------------------------------------------------------------------------------- helpers
def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite(v) -> bool:
    return not isinstance(v, float) or math.isfinite(v)


def _kind(v) -> str:
    return type(v).__name__
