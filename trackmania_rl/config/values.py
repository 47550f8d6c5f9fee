"""Settings as plain JSON values: what a checkpoint or a model folder stores instead of a Python file (DESIGN §2, §7).

A model folder is data: its `settings.json` holds every setting of `SETTINGS` (schema.py) as JSON values and
is read back without executing anything. `config_to_values(cfg)` encodes a `Config`; `config_from_values(values,
game_backend)` decodes and validates through the loader's `build_config` (missing settings added later get
their `ADDED_LATER` value, as for an older config file).

Encoding: tuples become lists; a Python `range` (the seeds of a `map_cycle` entry) becomes
`{"range": [start, stop, step]}`; numbers stay numbers, booleans booleans, strings strings. Decoding gives the
shapes a config file writes: a setting's top-level value is a list, the entries inside it are tuples.
"""

from __future__ import annotations

import json
import numbers
from pathlib import Path

from trackmania_rl.config.loader import Config, build_config
from trackmania_rl.config.schema import SETTINGS, ConfigError

SETTINGS_FILE = "settings.json"  # beside the weights of a checkpoint or a model folder
RANGE_KEY = "range"


def _encode(value, name: str):
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, range):
        return {RANGE_KEY: [value.start, value.stop, value.step]}
    if isinstance(value, (list, tuple)):
        return [_encode(v, name) for v in value]
    raise ConfigError(f"setting `{name}` holds a {type(value).__name__} ({value!r}), which has no JSON form")


def config_to_values(cfg: Config) -> dict:
    """Every setting of `cfg` (those of SETTINGS, no derived values) as JSON-able values."""
    return {name: _encode(getattr(cfg, name), name) for name in SETTINGS}


def _decode(value, name: str, source: str, top: bool = True):
    if isinstance(value, dict):
        bounds = value.get(RANGE_KEY)
        if (
            set(value) != {RANGE_KEY}
            or not isinstance(bounds, list)
            or len(bounds) != 3
            or not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds)
            or bounds[2] == 0
        ):
            raise ConfigError(
                f"{source}: setting `{name}` holds {json.dumps(value)}; the only object allowed is a range of seeds "
                '{"range": [start, stop, step]} (three integers, step not 0)'
            )
        return range(*bounds)
    if isinstance(value, list):
        items = [_decode(v, name, source, top=False) for v in value]
        return items if top else tuple(items)
    if value is None and not top:
        raise ConfigError(f"{source}: setting `{name}` holds a null inside it")
    return value  # a top-level null (an unset optional setting) is checked by the schema like any value


def config_from_values(values: dict, game_backend: str = "carracing", source: str = SETTINGS_FILE, inputs: dict | None = None) -> Config:
    """The validated Config of JSON `values` (as `config_to_values` writes them). ConfigError naming the
    setting for anything unusable."""
    if not isinstance(values, dict):
        raise ConfigError(f"{source}: expected an object of settings, got {type(values).__name__}")
    decoded = {}
    for name, value in values.items():
        if not isinstance(name, str):
            raise ConfigError(f"{source}: setting names must be strings, got {name!r}")
        decoded[name] = _decode(value, name, source)
    return build_config(decoded, game_backend=game_backend, inputs=inputs, source=source)


def settings_json(cfg: Config) -> str:
    """`config_to_values(cfg)` as the text of a settings.json file."""
    return json.dumps(config_to_values(cfg), indent=1, allow_nan=False) + "\n"


def read_settings(path: str | Path, game_backend: str = "carracing", inputs: dict | None = None) -> Config:
    """The Config of a settings.json file. ConfigError naming the file (missing, not JSON) or the setting."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"settings file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"settings file {path} cannot be read: {e}") from None
    try:
        values = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"settings file {path} is not valid JSON: {e}") from None
    return config_from_values(values, game_backend=game_backend, source=str(path), inputs=inputs)
