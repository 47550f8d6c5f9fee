"""The run settings: each setting's check, what it expects, and whether changing it needs a restart.

`SETTINGS` is the one place that says which settings exist; `RESTART_ONLY` is derived from it.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable
from typing import Any

from trackmania_rl.config.game_backends import FRAME_RENDERERS, GAME_BACKENDS, RACE_RULES


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


def _optional_non_negative_number(v):
    return v is None or _non_negative_number(v)


def _bool(v):
    return isinstance(v, bool)


def _optional_text(v):
    return v is None or (isinstance(v, str) and v.strip() != "")


HELD_OUT_SEEDS_BELOW = 50_000  # the held-out tracks (best/) stay below, as the training ranges; validation and test sets lie above


def _held_out_seeds(v):
    seeds = v if isinstance(v, range) else v if isinstance(v, (list, tuple)) else None
    return seeds is not None and 0 < len(seeds) <= 1_000 and all(_non_negative_int(s) and s < HELD_OUT_SEEDS_BELOW for s in seeds)


def _seed_sets(v):
    """validation_seeds, test_seeds: a list of 1 to 10 sets, each a range or list of 1 to 100,000 seeds >= 0."""
    if not isinstance(v, (list, tuple)) or not 0 < len(v) <= 10:
        return False
    for seeds in v:
        if isinstance(seeds, range):
            if not (0 < len(seeds) <= 100_000 and seeds.start >= 0 and seeds[-1] >= 0):
                return False
        elif not (isinstance(seeds, (list, tuple)) and 0 < len(seeds) <= 100_000 and all(_non_negative_int(s) for s in seeds)):
            return False
    return True


def _minutes_list(v):
    return isinstance(v, (list, tuple)) and all(_positive_number(m) for m in v) and list(v) == sorted(set(v))


ACTION_FLAGS = ("accelerate", "brake", "left", "right")
COAST = "coast"  # the action name of no flag pressed
# SuperTuxKart's controls beyond the four (games/supertuxkart/actions.py); only its backend plays them
KART_ACTION_FLAGS = ("drift", "nitro", "rescue")
MAX_FRAME_STACK = 16


def parse_action_name(name) -> dict | None:
    """An action set entry ("coast", or flags joined by "+", e.g. "accelerate+left") as its four flags, plus the kart
    flags it names (KART_ACTION_FLAGS, e.g. "accelerate+left+drift": only those named, so that every other action keeps
    its four keys); None if it is not one."""
    if not isinstance(name, str):
        return None
    flags = [] if name == COAST else name.split("+")
    if len(set(flags)) != len(flags) or not set(flags) <= set(ACTION_FLAGS + KART_ACTION_FLAGS):
        return None
    return {flag: flag in flags for flag in ACTION_FLAGS} | {flag: True for flag in KART_ACTION_FLAGS if flag in flags}


def _action_set(v):
    if v is None:
        return True
    if not isinstance(v, (list, tuple)) or not v or not all(parse_action_name(a) is not None for a in v):
        return False
    return len({tuple(parse_action_name(a).items()) for a in v}) == len(v)  # no action twice


def _optional_int_list(v):
    return v is None or (isinstance(v, (list, tuple)) and len(v) > 0 and all(_non_negative_int(x) for x in v))


def _action_words(v):
    return v is None or (isinstance(v, (list, tuple)) and len(v) == 4 and all(isinstance(w, str) and w.isalpha() for w in v))


def _env_kwargs(v):
    if v is None:
        return True
    scalar = (bool, int, float, str)
    return isinstance(v, dict) and all(isinstance(k, str) and k.isidentifier() and isinstance(x, scalar) for k, x in v.items())


def _frame_crop(v):
    return v is None or (isinstance(v, (list, tuple)) and len(v) == 4 and all(_non_negative_int(x) for x in v))


def _optional_number(v):
    return v is None or _number(v)


def _optional_positive_number(v):
    return v is None or _positive_number(v)


# The IQN network's image encoders (config setting `network_encoder`; agents/iqn.py builds them)
NETWORK_ENCODERS = ("linesight", "impala")
MAX_COLLECTORS_PER_CPU = 4  # more collector processes than this per core only slow every one of them down


def _collectors_count(v):
    return v == "auto" or (_non_negative_int(v) and v <= MAX_COLLECTORS_PER_CPU * (os.cpu_count() or 1))


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
    return isinstance(v, (list, tuple)) and len(v) == 2 and _positive_int(v[0]) and _non_negative_int(v[1]) and v[1] <= v[0]


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
    "game_backend": (
        lambda v: v in GAME_BACKENDS,
        " or ".join(f'"{b}"' for b in GAME_BACKENDS) + " (the game; absent: user_config.game_backend's)",
        True,
    ),
    "physics_steps_per_action": (_positive_int, "a positive integer", True),
    "H_downsized": (_positive_int, "a positive integer (pixels)", True),
    "W_downsized": (_positive_int, "a positive integer (pixels)", True),
    "frame_renderer": (lambda v: v in FRAME_RENDERERS, " or ".join(f'"{r}"' for r in FRAME_RENDERERS) + " (how frames are drawn)", True),
    "frame_hud": (_bool, "True or False (CarRacing: the frame is the whole view, its HUD bar's indicators included)", True),
    "frame_colour": (_bool, "True or False (each frame in colour, 3 channels R, G, B, instead of 1 grey)", True),
    "frame_stack": (
        lambda v: _positive_int(v) and v <= MAX_FRAME_STACK,
        f"an integer from 1 to {MAX_FRAME_STACK} (frames per state)",
        True,
    ),
    "action_set": (
        _action_set,
        'None (config_files/inputs_list.py) or a list of distinct actions, each "coast" or flags joined by "+" '
        '(accelerate, brake, left, right; SuperTuxKart also drift, nitro, rescue), e.g. "accelerate+left"',
        True,
    ),
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
    "off_road_penalty_per_action": (_non_negative_number, "a number >= 0", False),
    "reward_per_new_road_tile": (_non_negative_number, "a number >= 0", False),
    "road_tile_reward_max_m_behind_furthest": (_optional_non_negative_number, "None or a number >= 0 (metres)", False),
    "missed_road_tile_penalty": (_non_negative_number, "a number >= 0", False),
    "no_progress_penalty": (_non_negative_number, "a number >= 0 (taken when the no-progress cut-off ends a race)", False),
    "shaped_reward_min_dist_to_cur_vcp": (_non_negative_number, "a number >= 0", False),
    "shaped_reward_max_dist_to_cur_vcp": (_positive_number, "a positive number", False),
    "reward_per_game_point": (_number, "a number (x the game's own reward of each step; 0: not used)", False),
    "game_reward_clip": (_optional_positive_number, "None or a positive number (the game's reward of a step clipped to +-it)", False),
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
    "network_encoder": (
        lambda v: v in NETWORK_ENCODERS,
        '"linesight" (conv_layers as plain convolutions) or "impala" (a residual stage per conv_layers entry, its channels)',
        True,
    ),
    "float_hidden_dim": (_positive_int, "a positive integer", True),
    "dense_hidden_dimension": (_positive_int, "a positive integer", True),
    "iqn_embedding_dimension": (_positive_int, "a positive integer", True),
    "iqn_n": (_even_positive_int, "an even positive integer", True),
    "iqn_k": (_even_positive_int, "an even positive integer", True),
    "iqn_kappa": (_positive_number, "a positive number", False),
    "use_ddqn": (_bool, "True or False", False),
    "use_jit": (_bool, "True or False", True),
    "batch_size": (_positive_int, "a positive integer", True),
    "training_precision": (lambda v: v in ("auto", "float32", "bfloat16"), '"auto", "float32" or "bfloat16"', True),
    "training_cuda_graphs": (lambda v: v in ("auto", "on", "off"), '"auto", "on" (a CUDA device only) or "off"', True),
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
    "seed": (_non_negative_int, "an integer >= 0 (the run's seed: learner, collectors, track order; --seed)", True),
    "collectors_count": (
        _collectors_count,
        f'"auto" (the cores the learner does not need, docs/config.md) or an integer from 0 to {MAX_COLLECTORS_PER_CPU} per CPU core '
        "(0: no local collector, another rollout source plays)",
        True,
    ),
    "max_rollout_queue_size": (_positive_int, "a positive integer", True),
    "update_inference_network_every_n_actions": (_positive_int, "a positive integer", False),
    "send_shared_network_every_n_batches": (_positive_int, "a positive integer", False),
    "max_policy_lag": (_non_negative_int, "an integer >= 0 (published versions)", False),
    "save_frequency_s": (_positive_number, "a positive number (s)", False),
    "checkpoints_kept": (_positive_int, "an integer >= 1 (complete checkpoints kept in the run folder)", False),
    "collector_stall_timeout_s": (_positive_number, "a positive number (s)", False),
    "held_out_seeds": (_held_out_seeds, f"a range or list of 1 to 1000 track seeds, each from 0 to {HELD_OUT_SEEDS_BELOW - 1}", False),
    "held_out_eval_period_s": (_non_negative_number, "a number of seconds >= 0 (0: no held-out evaluation)", False),
    "held_out_rules": (
        lambda v: v in RACE_RULES,
        '"native" (CarRacing-v3\'s own episode rules) or "training" (the collectors\' cut-offs and finish line)',
        False,
    ),
    "keep_weights_at_minutes": (_minutes_list, "a list of increasing positive minutes of training", False),
    "held_out_keep_weights": (_bool, "True or False (keep the weights of every held-out evaluation)", False),
    "tail_score_bar": (_optional_number, "None or a number (a race scoring below it counts in the tail figures)", False),
    "best_tail_penalty": (
        _non_negative_number,
        "a number >= 0 (points taken from the held-out mean per percent of races below tail_score_bar; 0: the plain mean)",
        False,
    ),
    "validation_seeds": (_seed_sets, "a list of 1 to 10 sets of seeds (each a range or a list), the validation sets", False),
    "test_seeds": (_seed_sets, "a list of 1 to 10 sets of seeds (each a range or a list), the test sets", False),
    "max_training_backlog_batches": (_positive_int, "a positive integer (batches owed to the replay ratio)", False),
    # ---- a learner group (--learners N > 1, learner_group/)
    "learners_lr_scaling": (
        lambda v: v in ("none", "sqrt", "linear"),
        '"none", "sqrt" or "linear" (the lr of N learners: x 1, x sqrt(N) or x N)',
        False,
    ),
    "learner_group_timeout_s": (_positive_number, "a positive number (s): a rank silent this long stops the run", True),
    "learners_gradient_exchange": (
        lambda v: v in ("overlap", "after_backward"),
        '"overlap" (bucketed all_reduces started during backward) or "after_backward" (one all_reduce after it)',
        True,
    ),
    # ---- remote rollout sources (rollouts/ray, rollouts/http): off unless set, each an optional install
    # ---- the Gymnasium backend (game_backend = "gymnasium", games/gymnasium/)
    "gymnasium_env_id": (_optional_text, 'None or a registered Gymnasium env id, e.g. "ALE/Enduro-v5"', True),
    "gymnasium_ms_per_step": (_positive_number, "a positive number (game ms of one env step: ALE v5, 4 frames at 60 Hz = 66.67)", True),
    "gymnasium_action_words": (
        _action_words,
        'None or four words of the env\'s action meanings for (accelerate, brake, left, right), e.g. ("FIRE", "DOWN", "LEFT", "RIGHT")',
        True,
    ),
    "gymnasium_actions": (_optional_int_list, "None or a list of the env's action numbers, one per action of the action set", True),
    "float_inputs": (
        lambda v: v in ("game", "own_actions"),
        '"game" (every float the game backend gives) or "own_actions" (the mini-race clock and the previous actions only)',
        True,
    ),
    "gymnasium_env_kwargs": (
        _env_kwargs,
        'None or a dict of gymnasium.make keyword arguments (names to numbers, booleans or text), e.g. {"continuous": False}',
        True,
    ),
    "frame_crop": (_frame_crop, "None or (top, bottom, left, right) pixels cut from the env's image before resizing", True),
    "ray_address": (_optional_text, 'None, "auto" (a local cluster on loopback) or a Ray cluster address', True),
    "ray_actors": (_non_negative_int, "an integer >= 0 (collector actors on the Ray cluster)", True),
    # ---- more Ray source settings (rollouts/ray) here
    "ray_object_store_mb": (_positive_int, "a positive integer (MB of object store of the cluster `auto` starts)", True),
    "http_listen": (_optional_text, 'None or "HOST:PORT" (the HTTP endpoint for external game clients)', True),
    # ---- more HTTP source settings (rollouts/http) here
    "http_queue_size": (_positive_int, "a positive integer (races waiting for the learner; 429 beyond)", True),
    "http_off_policy_tolerance": (_non_negative_int, "an integer >= 0 (races waiting before clients are told to pause)", False),
    "http_heartbeat_interval_s": (_positive_number, "a positive number (s)", False),
    "http_client_timeout_s": (_positive_number, "a positive number (s)", False),
}

# Settings that were removed, with the one value an older file may still hold (a shipped model's settings, an older
# run's config copy): dropped when read. Any other value is refused with the reason (its behaviour is gone).
RETIRED = {
    "ray_games_per_actor": (
        1,
        "each Ray actor plays one game (K games in one actor measured slower than K actors, docs/cluster.md); "
        "for more games use more actors (ray_actors, --ray-actors)",
    ),
}

# settings that a live config edit cannot change (network shape, buffer layout, processes): a restart applies them
RESTART_ONLY = tuple(name for name, (_, _, needs_restart) in SETTINGS.items() if needs_restart)

# Settings added after config files were first written, with the value a file that predates them gets
# (an older run's config copy, a shipped model's settings): the behaviour it was written for. config_files/config.py
# sets the same values, except reward_per_new_road_tile (0.1 for new runs), missed_road_tile_penalty (2.0), held_out_rules
# (native) and frame_renderer (fast).
ADDED_LATER = {
    "frame_stack": 1,
    "action_set": None,
    "reward_per_game_point": 0.0,
    "game_reward_clip": None,
    "gymnasium_env_id": None,
    "gymnasium_ms_per_step": 1000 * 4 / 60,
    "gymnasium_action_words": None,
    "gymnasium_actions": None,
    "gymnasium_env_kwargs": None,
    "float_inputs": "game",
    "frame_crop": None,
    "max_policy_lag": 100_000,
    "checkpoints_kept": 2,
    "max_training_backlog_batches": 400,
    "learners_lr_scaling": "sqrt",
    "learner_group_timeout_s": 120.0,
    "learners_gradient_exchange": "overlap",
    "seed": 0,
    "frame_renderer": "pygame",  # every model and run before it saw CarRacing's own drawing
    "frame_hud": False,
    "frame_colour": False,
    "network_encoder": "linesight",
    "training_precision": "auto",
    "training_cuda_graphs": "auto",
    "off_road_penalty_per_action": 0.0,
    "reward_per_new_road_tile": 0.0,
    "road_tile_reward_max_m_behind_furthest": None,
    "missed_road_tile_penalty": 0.0,
    "no_progress_penalty": 0.0,
    "held_out_seeds": range(100, 110),
    "held_out_eval_period_s": 300,
    "held_out_rules": "training",  # the held-out races of every run before it ended by the training rules
    "keep_weights_at_minutes": [30],
    "held_out_keep_weights": False,
    "tail_score_bar": 800.0,
    "best_tail_penalty": 0.0,  # best/ was chosen by the plain held-out mean
    # the sets named on 2026-12-02 (docs/results.md "Validation and test tracks"): CarRacing's; a game's config sets its own
    "validation_seeds": [range(s, s + 100) for s in (500_000, 200_000, 300_000, 400_000, 900_000)],
    "test_seeds": [range(600_000, 600_100), range(700_000, 700_100), range(800_000, 800_100)],
    "ray_address": None,
    "ray_actors": 0,
    # ---- Ray source settings added later
    "ray_object_store_mb": 512,
    "http_listen": None,
    # ---- HTTP source settings added later
    "http_queue_size": 8,
    "http_off_policy_tolerance": 2,
    "http_heartbeat_interval_s": 5.0,
    "http_client_timeout_s": 60.0,
}


# ---- the SuperTuxKart backend (game_backend = "supertuxkart", games/supertuxkart/): its settings, which every other game
# ignores, with the values a config that does not name them gets (config_files/supertuxkart.py sets them all).
SUPERTUXKART_DIFFICULTIES = (0, 1, 2, 3)  # RaceConfig.difficulty; it scales every kart, ours too (3: the fastest)


def _kart_map_names(v):
    """A list of distinct SuperTuxKart map names, each a track's folder name or it with ":reverse"."""
    if not isinstance(v, (list, tuple)) or len(set(v)) != len(v):
        return False
    return all(isinstance(n, str) and n.removesuffix(":reverse").isidentifier() for n in v)


SUPERTUXKART_SETTINGS = {
    "supertuxkart_kart": (lambda v: isinstance(v, str) and v.isidentifier(), 'a kart\'s name, e.g. "tux" (pystk2.list_karts())', True),
    "supertuxkart_difficulty": (
        lambda v: _non_negative_int(v) and v in SUPERTUXKART_DIFFICULTIES,
        "0, 1, 2 or 3 (the race's difficulty: it scales every kart, ours too; 3 is the fastest)",
        True,
    ),
    "supertuxkart_laps": (_positive_int, "a positive integer (laps of a race)", True),
    "supertuxkart_view_m": (_positive_number, "a positive number (metres of road across the frame's width)", True),
    "supertuxkart_native_time_cap_ms": (
        _positive_int,
        "a positive integer (ms of game time after which a race by the native rules ends unfinished)",
        False,
    ),
    "supertuxkart_held_out_tracks": (
        _kart_map_names,
        'a list of distinct map names ("track" or "track:reverse"): tracks no map_cycle entry trains on, in either direction',
        False,
    ),
    "supertuxkart_test_tracks": (
        _kart_map_names,
        'a list of distinct map names ("track" or "track:reverse"): tracks neither trained on nor held out, in either direction',
        False,
    ),
}
SETTINGS.update(SUPERTUXKART_SETTINGS)
ADDED_LATER.update(
    {
        "supertuxkart_kart": "tux",
        "supertuxkart_difficulty": 3,
        "supertuxkart_laps": 1,
        "supertuxkart_view_m": 80.0,
        "supertuxkart_native_time_cap_ms": 300_000,
        "supertuxkart_held_out_tracks": [],
        "supertuxkart_test_tracks": [],
    }
)
RESTART_ONLY = tuple(name for name, (_, _, needs_restart) in SETTINGS.items() if needs_restart)  # again, with these
