"""Loading, validating and hot-reloading the run configuration.

A config is a plain Python file of module-level settings (config_files/config.py). It is executed in a
fresh namespace, checked setting by setting, and returned as an immutable `Config` with a few derived
values. The settings and their checks are in `schema.py`; hot reloading is `live.py`.

A config file may start from another: a top-level `base = "config.py"` (a string, the path relative to the file's
own folder) names its base, and the file then sets only what differs. Each file of the chain runs in its own fresh
namespace; the settings of a file replace its base's. `whole_copy.py` writes such a file out whole (a run's live
config holds every setting in force).
"""

from __future__ import annotations

import ast
import runpy
import types
from pathlib import Path

from trackmania_rl.config.game_backends import GYMNASIUM, MS_PER_PHYSICS_STEP
from trackmania_rl.config.schema import ADDED_LATER, RETIRED, SETTINGS, ConfigError, parse_action_name

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO_ROOT / "config_files"


DERIVED = ("ms_per_action", "temporal_mini_race_duration_actions", "inputs", "input_settings")


class Config(types.SimpleNamespace):
    """The validated settings of one config file, plus derived values. Treat as read-only."""

    def replace(self, **changes) -> Config:
        """A validated copy with some settings changed (derived values are recomputed)."""
        values = {k: v for k, v in vars(self).items() if k not in DERIVED}
        values.update(changes)
        return build_config(values, inputs=self.inputs_file(), source="replace()")

    def inputs_file(self) -> dict:
        """The contents of the inputs file this config was built with."""
        return {"inputs": self.inputs, **self.input_settings}

    def settings(self) -> dict:
        return {k: v for k, v in vars(self).items() if k not in DERIVED}


def channels_per_frame(cfg) -> int:
    """1 for a grey frame, 3 with frame_colour (R, G, B in that order)."""
    return 3 if cfg.frame_colour else 1


def frame_shape(cfg) -> tuple[int, int, int]:
    """The network's frame of one state under `cfg`: (C, H_downsized, W_downsized), C = frame_stack channels, or with
    frame_colour 3 x frame_stack (each frame's R, G, B), the oldest frame first."""
    return (int(cfg.frame_stack) * channels_per_frame(cfg), int(cfg.H_downsized), int(cfg.W_downsized))


def read_python_file(path: Path) -> dict:
    try:
        namespace = runpy.run_path(str(path))
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except SyntaxError as e:
        raise ConfigError(f"config file {path} does not parse: line {e.lineno}: {e.msg}") from None
    except Exception as e:  # a config is user code: any error in it is a config error
        raise ConfigError(f"config file {path} raised {type(e).__name__}: {e}") from None
    return settings_of(namespace)


def settings_of(namespace: dict) -> dict:
    """The names a config file's namespace sets: helper names (a leading underscore) and modules left out."""
    return {k: v for k, v in namespace.items() if not k.startswith("_") and not isinstance(v, types.ModuleType)}


BASE = "base"  # the name a config file gives its base file with; never a setting
_BASE_FORM = f'`{BASE}` names the file this one starts from: set it once, at the top level, as {BASE} = "config.py"'


def _base_declaration(path: Path) -> str | None:
    """The string of the file's top-level `base = "<file>"`, or None. Read from its syntax, without running it."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {path} cannot be read: {e}") from None
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as e:
        raise ConfigError(f"config file {path} does not parse: line {e.lineno}: {e.msg}") from None
    declarations = [
        node for node in tree.body if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == BASE for t in node.targets)
    ]
    if not declarations:
        return None
    node = declarations[0]
    if len(declarations) > 1 or len(node.targets) > 1:
        raise ConfigError(f"config file {path}, line {node.lineno}: {_BASE_FORM}")
    if not isinstance(node.value, ast.Constant) or not isinstance(node.value.value, str) or not node.value.value.strip():
        raise ConfigError(f"config file {path}, line {node.lineno}: {_BASE_FORM} (a file name in quotes)")
    return node.value.value


def declared_base(path: str | Path) -> Path | None:
    """The file `path` starts from (its `base`, relative to its folder), or None for a whole file."""
    path = Path(path)
    name = _base_declaration(path)
    return None if name is None else path.parent / name


def config_files(path: str | Path) -> list[Path]:
    """`path` and the files it starts from, the whole one first. ConfigError naming a missing base or a cycle."""
    chain = [Path(path)]
    seen = [chain[0].resolve()]
    while (base := declared_base(chain[-1])) is not None:
        if not base.is_file():
            raise ConfigError(f"config file {chain[-1]}: its base {base} does not exist")
        if base.resolve() in seen:
            raise ConfigError(f"config file {path}: its bases form a cycle: {' -> '.join(str(p) for p in [*chain, base])}")
        chain.append(base)
        seen.append(base.resolve())
    return chain[::-1]


def config_source(files: list[Path]) -> str:
    """How messages name a config read from `files` (config_files' order): the file, then its bases if any."""
    *bases, path = files
    return f"{path} (over {' over '.join(str(p) for p in reversed(bases))})" if bases else str(path)


def read_config_files(files: list[Path]) -> dict:
    """The settings of a chain of config files (config_files' order), each file's replacing its base's."""
    values = {}
    for file in files:
        declared = _base_declaration(file)
        own = read_python_file(file)
        if own.pop(BASE, None) != declared:  # rebound after its declaration: which file is meant is unclear
            raise ConfigError(f"config file {file}: {_BASE_FORM}")
        values.update(own)
    return values


def read_config_file(path: str | Path, bases: bool = True) -> dict:
    """The settings a config file sets, its bases' included. `bases=False`: a file that names a base is refused (a
    run's live config holds every setting in force)."""
    path = Path(path)
    if not bases and _base_declaration(path) is not None:
        raise ConfigError(
            f"config file {path}: `{BASE}` is not allowed in a run's live config, which holds every setting in force "
            "(a run started from a file with a base gets a whole copy of it)"
        )
    return read_config_files(config_files(path))


def load_inputs(path: Path | None = None) -> dict:
    """The action set and its game-control magnitudes from config_files/inputs_list.py."""
    path = Path(path) if path else CONFIG_DIR / "inputs_list.py"
    values = read_python_file(path)
    inputs = values.get("inputs")
    keys = {"accelerate", "brake", "left", "right"}
    if not isinstance(inputs, list) or not inputs:
        raise ConfigError(f"{path}: `inputs` must be a non-empty list of actions")
    for i, action in enumerate(inputs):
        if not isinstance(action, dict) or set(action) != keys or not all(isinstance(v, bool) for v in action.values()):
            raise ConfigError(f"{path}: inputs[{i}] must be a dict of the four booleans {sorted(keys)}")
    values["inputs"] = [dict(a) for a in inputs]
    return values


def _shared_seeds(a, b) -> list[int]:
    """The seeds both hold (each a range, a list or one seed), smallest first."""
    a, b = (a if isinstance(a, (range, list, tuple)) else [a]), (b if isinstance(b, (range, list, tuple)) else [b])
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    return sorted(s for s in small if s in large)


def _check_seed_roles(values: dict, source: str) -> None:
    """Each seed has one role at most: trained on (the map_cycle's entries that fill the buffer), held out (`best/` is
    chosen on them), validation (settings are chosen on them) or test (the published figures, chosen on nothing)."""
    trained = [seeds for _, seeds, _, fill_buffer in values["map_cycle"] if fill_buffer]
    roles = [
        ("held_out_seeds", [values["held_out_seeds"]], "model selection must use tracks the learner never stores"),
        ("validation_seeds", values["validation_seeds"], "settings must be chosen on tracks the learner never stores"),
        ("test_seeds", values["test_seeds"], "a test figure needs tracks the learner never stores"),
    ]
    for name, sets, why in roles:
        overlap = sorted({s for seeds in sets for other in trained for s in _shared_seeds(seeds, other)})
        if overlap:
            raise ConfigError(f"{source}: setting `{name}` holds tracks the map_cycle trains on ({overlap[:5]}...): {why}")
    for i, (name, sets, _) in enumerate(roles):
        for other_name, other_sets, _ in roles[i + 1 :]:
            overlap = sorted({s for seeds in sets for other in other_sets for s in _shared_seeds(seeds, other)})
            if overlap:
                raise ConfigError(
                    f"{source}: settings `{name}` and `{other_name}` share tracks ({overlap[:5]}...): a track that chose "
                    "weights or settings cannot also measure them"
                )
    tests = values["test_seeds"]
    for i, seeds in enumerate(tests):
        for other in tests[i + 1 :]:
            if _shared_seeds(seeds, other):
                raise ConfigError(f"{source}: setting `test_seeds`: two of its sets share tracks; each set is its own sample")


def build_config(values: dict, game_backend: str = "carracing", inputs: dict | None = None, source: str = "config") -> Config:
    """`game_backend`: the game when the values do not name one (their `game_backend` setting wins)."""
    if "game_backend" not in values and game_backend not in MS_PER_PHYSICS_STEP:
        raise ConfigError(f"user_config.game_backend: unknown game backend {game_backend!r}; expected one of {sorted(MS_PER_PHYSICS_STEP)}")
    values = {**{k: v for k, v in ADDED_LATER.items() if k not in values}, "game_backend": game_backend, **values}
    for name, (value, reason) in RETIRED.items():
        if name in values and values.pop(name) != value:
            raise ConfigError(f"{source}: setting `{name}` was removed: {reason}")
    missing = [name for name in SETTINGS if name not in values]
    if missing:
        raise ConfigError(f"{source}: missing setting(s) {', '.join(missing)}")
    for name, (check, expected, _) in SETTINGS.items():
        if not check(values[name]):
            raise ConfigError(f"{source}: setting `{name}` = {values[name]!r} is invalid: expected {expected}")
    unknown = sorted(set(values) - set(SETTINGS))
    if unknown:
        raise ConfigError(f"{source}: unknown setting(s) {', '.join(unknown)} (a typo?)")
    game_backend = values["game_backend"]
    ms_per_step = values["gymnasium_ms_per_step"] if game_backend == GYMNASIUM else MS_PER_PHYSICS_STEP[game_backend]
    ms_per_action = values["physics_steps_per_action"] * ms_per_step
    horizon = int(values["temporal_mini_race_duration_ms"] // ms_per_action)
    if horizon < 1:
        raise ConfigError(f"{source}: setting `temporal_mini_race_duration_ms` is shorter than one action ({ms_per_action} ms)")
    if values["n_steps"] > horizon:
        raise ConfigError(f"{source}: setting `n_steps` ({values['n_steps']}) exceeds the mini-race horizon of {horizon} actions")
    if values["oversample_maximum_term_steps"] > values["oversample_long_term_steps"]:
        raise ConfigError(f"{source}: setting `oversample_maximum_term_steps` must not exceed `oversample_long_term_steps`")
    if values["shaped_reward_min_dist_to_cur_vcp"] > values["shaped_reward_max_dist_to_cur_vcp"]:
        raise ConfigError(f"{source}: setting `shaped_reward_min_dist_to_cur_vcp` must not exceed `shaped_reward_max_dist_to_cur_vcp`")
    height, width = values["H_downsized"], values["W_downsized"]
    if values["network_encoder"] == "linesight":  # the impala encoder's stages only halve the size, rounded up
        for _channels, kernel, stride in values["conv_layers"]:
            height, width = (height - kernel) // stride + 1, (width - kernel) // stride + 1
    if height < 1 or width < 1:
        raise ConfigError(
            f"{source}: setting `conv_layers` does not fit a {values['H_downsized']}x{values['W_downsized']} frame "
            "(the image shrinks to nothing): use fewer or smaller layers, or larger H_downsized/W_downsized"
        )
    lookahead = values["n_zone_centers_in_inputs"] * values["one_every_n_zone_centers_in_inputs"]
    if values["n_zone_centers_extrapolate_after_end_of_map"] < lookahead:
        raise ConfigError(
            f"{source}: setting `n_zone_centers_extrapolate_after_end_of_map` must be >= the look-ahead span "
            f"n_zone_centers_in_inputs x one_every_n_zone_centers_in_inputs = {lookahead}"
        )
    _check_seed_roles(values, source)
    if game_backend == GYMNASIUM and values["gymnasium_env_id"] is None:
        raise ConfigError(f"{source}: setting `gymnasium_env_id` must name the env to play when game_backend is {GYMNASIUM!r}")
    inputs_file = dict(inputs if inputs is not None else load_inputs())
    if values["action_set"] is not None:  # the config's own action set replaces the inputs file's
        inputs_file["inputs"] = [parse_action_name(name) for name in values["action_set"]]
    if values["gymnasium_actions"] is not None and len(values["gymnasium_actions"]) != len(inputs_file["inputs"]):
        raise ConfigError(
            f"{source}: setting `gymnasium_actions` has {len(values['gymnasium_actions'])} entries for an action set of "
            f"{len(inputs_file['inputs'])}: give one env action per action"
        )
    return Config(
        **values,
        ms_per_action=ms_per_action,
        temporal_mini_race_duration_actions=horizon,
        inputs=inputs_file.pop("inputs"),
        input_settings=inputs_file,
    )


def load_config(
    path: str | Path | None = None, game_backend: str | None = None, inputs_path: str | Path | None = None, bases: bool = True
) -> Config:
    """Read and validate a config file (default: config_files/config.py), with its bases. Raises ConfigError.
    `game_backend`: the game when the files do not set `game_backend` (default: user_config's). `bases=False`: a
    file naming a base is refused (see read_config_file)."""
    path = Path(path) if path else CONFIG_DIR / "config.py"
    if game_backend is None:
        game_backend = load_user_config().game_backend
    files = config_files(path) if bases else [path]
    values = read_config_files(files) if bases else read_config_file(path, bases=False)
    return build_config(values, game_backend=game_backend, inputs=load_inputs(inputs_path), source=config_source(files))


def load_user_config(path: str | Path | None = None) -> types.SimpleNamespace:
    path = Path(path) if path else CONFIG_DIR / "user_config.py"
    values = read_python_file(path)
    defaults = {
        "device": "auto",
        "game_backend": "carracing",
        "save_dir": "save",
        "tensorboard_dir": "tensorboard",
        "trackmania_base_path": "",
        "base_tmi_port": 8478,
    }
    defaults.update(values)
    if not isinstance(defaults["device"], str):
        raise ConfigError(f"{path}: setting `device` must be a string such as 'auto', 'cpu' or 'cuda'")
    return types.SimpleNamespace(**defaults)


def default_config(**overrides) -> Config:
    """The repository's config_files/config.py with some settings changed (for tests and tools)."""
    cfg = load_config(game_backend="carracing")
    return cfg.replace(**overrides) if overrides else cfg
