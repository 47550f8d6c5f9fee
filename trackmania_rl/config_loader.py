"""Loading, validating and hot-reloading the run configuration.

A config is a plain Python file of module-level settings (config_files/config.py). It is executed in a
fresh namespace, checked setting by setting, and returned as an immutable `Config` with a few derived
values. `LiveConfig` re-reads the running copy and refuses edits that do not parse or fail validation,
keeping the previous config, and holds back edits to settings that need a restart.
"""

from __future__ import annotations

import math
import numbers
import runpy
import types
from pathlib import Path
from typing import Any, Callable

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = REPO_ROOT / "config_files"

# Game time per physics step, by backend (CarRacing: 50 Hz; Trackmania: 100 Hz).
MS_PER_PHYSICS_STEP = {"carracing": 20, "trackmania": 10}


class ConfigError(ValueError):
    """A config file or setting is unusable; the message names the file and the setting."""


def _positive_int(v):
    return isinstance(v, numbers.Integral) and not isinstance(v, bool) and v > 0


def _non_negative_int(v):
    return isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 0


def _number(v):
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def _positive_number(v):
    return _number(v) and v > 0


def _non_negative_number(v):
    return _number(v) and v >= 0


def _probability(v):
    return _number(v) and 0 <= v <= 1


def _bool(v):
    return isinstance(v, bool)


def _even_positive_int(v):
    return _positive_int(v) and v % 2 == 0


def _schedule(value_check):
    def check(v):
        if not isinstance(v, (list, tuple)) or not v:
            return False
        steps = []
        for point in v:
            if not isinstance(point, (list, tuple)) or len(point) != 2:
                return False
            if not _non_negative_number(point[0]) or not value_check(point[1]):
                return False
            steps.append(point[0])
        return steps[0] == 0 and steps == sorted(steps)

    return check


def _positive_schedule(v):
    # geometric interpolation needs non-zero values of one sign; lr and epsilons are positive
    return _schedule(_positive_number)(v)


def _epsilon_schedule(v):
    return _schedule(lambda e: _positive_number(e) and e <= 1)(v)


def _memory_size(v):
    return (
        isinstance(v, (list, tuple))
        and len(v) == 2
        and _positive_int(v[0])
        and _non_negative_int(v[1])
        and v[1] <= v[0]
    )


def _memory_size_schedule(v):
    if not _schedule(_memory_size)(v):
        return False
    capacities = [p[1][0] for p in v]
    return capacities == sorted(capacities)


def _conv_layers(v):
    return (
        isinstance(v, (list, tuple))
        and len(v) > 0
        and all(isinstance(layer, (list, tuple)) and len(layer) == 3 and all(_positive_int(x) for x in layer) for layer in v)
    )


def _map_cycle(v):
    if not isinstance(v, (list, tuple)) or not v:
        return False
    for entry in v:
        if not isinstance(entry, (list, tuple)) or len(entry) != 4:
            return False
        name, seeds, is_explo, fill_buffer = entry
        if not isinstance(name, str) or not name:
            return False
        if isinstance(seeds, range):
            if len(seeds) == 0 or min(seeds) < 0:
                return False
        elif not _non_negative_int(seeds):
            return False
        if not _bool(is_explo) or not _bool(fill_buffer):
            return False
    return True


# name -> (check, description of what is expected, needs a restart to change)
SETTINGS: dict[str, tuple[Callable[[Any], bool], str, bool]] = {
    "physics_steps_per_action": (_positive_int, "a positive integer", True),
    "H_downsized": (_positive_int, "a positive integer (pixels)", True),
    "W_downsized": (_positive_int, "a positive integer (pixels)", True),
    "n_prev_actions_in_inputs": (_non_negative_int, "an integer >= 0", True),
    "n_zone_centers_in_inputs": (_positive_int, "a positive integer", True),
    "one_every_n_zone_centers_in_inputs": (_positive_int, "a positive integer", True),
    "margin_to_announce_finish_meters": (_positive_number, "a positive number", True),
    "distance_between_checkpoints": (_positive_number, "a positive number", True),
    "n_zone_centers_extrapolate_before_start_of_map": (_positive_int, "a positive integer", True),
    "n_zone_centers_extrapolate_after_end_of_map": (_positive_int, "a positive integer", True),
    "road_width": (_positive_number, "a positive number", False),
    "cutoff_rollout_if_race_not_finished_within_duration_ms": (_positive_int, "a positive integer (ms)", False),
    "cutoff_rollout_if_no_vcp_passed_within_duration_ms": (_positive_int, "a positive integer (ms)", False),
    "constant_reward_per_ms": (_number, "a number", False),
    "reward_per_m_advanced_along_centerline": (_number, "a number", False),
    "shaped_reward_dist_to_cur_vcp": (_number, "a number", False),
    "shaped_reward_min_dist_to_cur_vcp": (_non_negative_number, "a number >= 0", False),
    "shaped_reward_max_dist_to_cur_vcp": (_positive_number, "a positive number", False),
    "n_steps": (_positive_int, "a positive integer", True),
    "discard_non_greedy_actions_in_nsteps": (_bool, "True or False", False),
    "temporal_mini_race_duration_ms": (_positive_int, "a positive integer (ms)", True),
    "oversample_long_term_steps": (_non_negative_int, "an integer >= 0", False),
    "oversample_maximum_term_steps": (_non_negative_int, "an integer >= 0", False),
    "gamma_schedule": (_schedule(lambda g: _number(g) and 0 < g <= 1), "a list of (frames, gamma in (0, 1])", False),
    "memory_size_schedule": (
        _memory_size_schedule,
        "a list of (frames, (capacity, start_learn <= capacity)) with growing capacities",
        False,
    ),
    "buffer_test_ratio": (_probability, "a probability in [0, 1]", False),
    "buffer_test_switch_probability": (_probability, "a probability in [0, 1]", False),
    "number_times_single_memory_is_used_before_discard": (_positive_number, "a positive number", False),
    "prio_alpha": (_non_negative_number, "a number >= 0", False),
    "prio_beta": (_probability, "a number in [0, 1]", False),
    "prio_epsilon": (_positive_number, "a positive number", False),
    "conv_layers": (_conv_layers, "a list of (channels, kernel, stride) positive integers", True),
    "float_hidden_dim": (_positive_int, "a positive integer", True),
    "dense_hidden_dimension": (_positive_int, "a positive integer", True),
    "iqn_embedding_dimension": (_positive_int, "a positive integer", True),
    "iqn_n": (_even_positive_int, "an even positive integer", True),
    "iqn_k": (_even_positive_int, "an even positive integer", True),
    "iqn_kappa": (_positive_number, "a positive number", False),
    "use_ddqn": (_bool, "True or False", False),
    "use_jit": (_bool, "True or False", True),
    "batch_size": (_positive_int, "a positive integer", True),
    "lr_schedule": (_positive_schedule, "a list of (frames, lr) with positive lr", False),
    "weight_decay_lr_ratio": (_non_negative_number, "a number >= 0", False),
    "adam_epsilon": (_positive_number, "a positive number", False),
    "adam_beta1": (lambda v: _number(v) and 0 <= v < 1, "a number in [0, 1)", False),
    "adam_beta2": (lambda v: _number(v) and 0 <= v < 1, "a number in [0, 1)", False),
    "clip_grad_norm": (_positive_number, "a positive number", False),
    "clip_grad_value": (_positive_number, "a positive number", False),
    "number_memories_trained_on_between_target_network_updates": (_positive_int, "a positive integer", False),
    "soft_update_tau": (_probability, "a number in [0, 1]", False),
    "epsilon_schedule": (_epsilon_schedule, "a list of (frames, epsilon in (0, 1])", False),
    "epsilon_boltzmann_schedule": (_epsilon_schedule, "a list of (frames, value in (0, 1])", False),
    "tau_epsilon_boltzmann": (_non_negative_number, "a number >= 0", False),
    "map_cycle": (
        _map_cycle,
        "a non-empty list of (name, seed or range of seeds >= 0, is_explo bool, fill_buffer bool)",
        False,
    ),
    "collectors_count": (_positive_int, "a positive integer", True),
    "max_rollout_queue_size": (_positive_int, "a positive integer", True),
    "update_inference_network_every_n_actions": (_positive_int, "a positive integer", False),
    "send_shared_network_every_n_batches": (_positive_int, "a positive integer", False),
    "save_frequency_s": (_positive_number, "a positive number (s)", False),
    "collector_stall_timeout_s": (_positive_number, "a positive number (s)", False),
}

DERIVED = ("ms_per_action", "temporal_mini_race_duration_actions", "game_backend", "inputs", "input_settings")


class Config(types.SimpleNamespace):
    """The validated settings of one config file, plus derived values. Treat as read-only."""

    def replace(self, **changes) -> "Config":
        """A validated copy with some settings changed (derived values are recomputed)."""
        values = {k: v for k, v in vars(self).items() if k not in DERIVED}
        values.update(changes)
        return build_config(values, game_backend=self.game_backend, inputs=self.inputs_file(), source="replace()")

    def inputs_file(self) -> dict:
        """The contents of the inputs file this config was built with."""
        return {"inputs": self.inputs, **self.input_settings}

    def settings(self) -> dict:
        return {k: v for k, v in vars(self).items() if k not in DERIVED}


def _read_python_file(path: Path) -> dict:
    try:
        namespace = runpy.run_path(str(path))
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except SyntaxError as e:
        raise ConfigError(f"config file {path} does not parse: line {e.lineno}: {e.msg}") from None
    except Exception as e:  # a config is user code: any error in it is a config error
        raise ConfigError(f"config file {path} raised {type(e).__name__}: {e}") from None
    return {k: v for k, v in namespace.items() if not k.startswith("_") and not isinstance(v, types.ModuleType)}


def load_inputs(path: Path | None = None) -> dict:
    """The action set and its game-control magnitudes from config_files/inputs_list.py."""
    path = Path(path) if path else CONFIG_DIR / "inputs_list.py"
    values = _read_python_file(path)
    inputs = values.get("inputs")
    keys = {"accelerate", "brake", "left", "right"}
    if not isinstance(inputs, list) or not inputs:
        raise ConfigError(f"{path}: `inputs` must be a non-empty list of actions")
    for i, action in enumerate(inputs):
        if not isinstance(action, dict) or set(action) != keys or not all(isinstance(v, bool) for v in action.values()):
            raise ConfigError(f"{path}: inputs[{i}] must be a dict of the four booleans {sorted(keys)}")
    values["inputs"] = [dict(a) for a in inputs]
    return values


def build_config(values: dict, game_backend: str = "carracing", inputs: dict | None = None, source: str = "config") -> Config:
    if game_backend not in MS_PER_PHYSICS_STEP:
        raise ConfigError(f"user_config.game_backend: unknown game backend {game_backend!r}; expected one of {sorted(MS_PER_PHYSICS_STEP)}")
    missing = [name for name in SETTINGS if name not in values]
    if missing:
        raise ConfigError(f"{source}: missing setting(s) {', '.join(missing)}")
    for name, (check, expected, _) in SETTINGS.items():
        if not check(values[name]):
            raise ConfigError(f"{source}: setting `{name}` = {values[name]!r} is invalid: expected {expected}")
    unknown = sorted(set(values) - set(SETTINGS))
    if unknown:
        raise ConfigError(f"{source}: unknown setting(s) {', '.join(unknown)} (a typo?)")
    ms_per_action = values["physics_steps_per_action"] * MS_PER_PHYSICS_STEP[game_backend]
    horizon = values["temporal_mini_race_duration_ms"] // ms_per_action
    if horizon < 1:
        raise ConfigError(f"{source}: setting `temporal_mini_race_duration_ms` is shorter than one action ({ms_per_action} ms)")
    if values["n_steps"] > horizon:
        raise ConfigError(f"{source}: setting `n_steps` ({values['n_steps']}) exceeds the mini-race horizon of {horizon} actions")
    if values["oversample_maximum_term_steps"] > values["oversample_long_term_steps"]:
        raise ConfigError(f"{source}: setting `oversample_maximum_term_steps` must not exceed `oversample_long_term_steps`")
    if values["shaped_reward_min_dist_to_cur_vcp"] > values["shaped_reward_max_dist_to_cur_vcp"]:
        raise ConfigError(f"{source}: setting `shaped_reward_min_dist_to_cur_vcp` must not exceed `shaped_reward_max_dist_to_cur_vcp`")
    height, width = values["H_downsized"], values["W_downsized"]
    for channels, kernel, stride in values["conv_layers"]:
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
    inputs_file = dict(inputs if inputs is not None else load_inputs())
    return Config(
        **values,
        ms_per_action=ms_per_action,
        temporal_mini_race_duration_actions=horizon,
        game_backend=game_backend,
        inputs=inputs_file.pop("inputs"),
        input_settings=inputs_file,
    )


def load_config(path: str | Path | None = None, game_backend: str | None = None, inputs_path: str | Path | None = None) -> Config:
    """Read and validate a config file (default: config_files/config.py). Raises ConfigError."""
    path = Path(path) if path else CONFIG_DIR / "config.py"
    if game_backend is None:
        game_backend = load_user_config().game_backend
    return build_config(_read_python_file(path), game_backend=game_backend, inputs=load_inputs(inputs_path), source=str(path))


def load_user_config(path: str | Path | None = None) -> types.SimpleNamespace:
    path = Path(path) if path else CONFIG_DIR / "user_config.py"
    values = _read_python_file(path)
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


class LiveConfig:
    """The config of a running process, re-read from its file on `reload()`.

    An edit that does not parse or fails validation is refused and the previous config kept; edits to
    settings that need a restart are reported once and not applied.
    """

    def __init__(self, path: str | Path, game_backend: str = "carracing", log: Callable[[str], None] = print):
        self.path = Path(path)
        self.game_backend = game_backend
        self.log = log
        self.current = load_config(self.path, game_backend=game_backend)
        self._mtime = self._read_mtime()
        self._last_error: str | None = None
        self._held_back: dict = {}

    def _read_mtime(self):
        try:
            return self.path.stat().st_mtime_ns
        except FileNotFoundError:
            return None

    def reload(self) -> bool:
        """Re-read the file if it changed. Returns True when new values were applied."""
        mtime = self._read_mtime()
        if mtime == self._mtime:
            return False
        self._mtime = mtime
        try:
            fresh = build_config(
                _read_python_file(self.path), game_backend=self.game_backend, inputs=self.current.inputs_file(), source=str(self.path)
            )
        except ConfigError as e:
            message = f"config edit refused, keeping the previous config: {e}"
            if message != self._last_error:
                self.log(message)
            self._last_error = message
            return False
        self._last_error = None
        values = fresh.settings()
        held_back = {}
        for name, (_, _, needs_restart) in SETTINGS.items():
            if needs_restart and values[name] != getattr(self.current, name):
                held_back[name] = values[name]
                values[name] = getattr(self.current, name)
        for name, value in held_back.items():
            if self._held_back.get(name, object()) != value:
                self.log(f"config setting `{name}` = {value!r} needs a restart: not applied to this run")
        self._held_back = held_back
        changed = [n for n in SETTINGS if values[n] != getattr(self.current, n)]
        if not changed:
            return False
        self.current = build_config(values, game_backend=self.game_backend, inputs=self.current.inputs_file(), source=str(self.path))
        self.log(f"config reloaded: {', '.join(changed)} changed")
        return True
