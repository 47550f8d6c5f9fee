"""Game figures (DESIGN §5): how close a collector's `rollout()` runs to the bare game, and what each renderer costs.

- `game.bare_steps_per_s`: the game alone, actions per second of wall time: reset, then per action one
  frame (drawn and made grey as the network gets it) and `physics_steps_per_action` physics steps, through the
  same game instance as the rollout, replaying the very actions the rollout played on the same seed, so both do
  the same physics and draw the same scenes; frames drawn by CarRacing's pygame code (frame_renderer "pygame");
- `game.rollout_steps_per_s`: a full `CarRacingGameInstance.rollout()` acting through a collector's own
  path (`make_policy`): `CollectorPolicy` (agents/policy.py) over a real `SharedNetwork` holding a
  network of the default config sizes, on the CPU with the collector's torch settings (one thread, batch
  1, iqn_k quantiles per action, its acting program `MeanQAtFixedTaus`, convolutions without oneDNN:
  agents/acting.py `use_acting_torch_settings`), its weights fetched every
  `update_inference_network_every_n_actions` actions; the network's decision is paid for, while the car
  plays the actions the centerline follower chose in an untimed recording rollout (the follower's own
  work is not a collector's, so it is not timed);
- `game.collector_efficiency`: their ratio (informational: the network's decision is a fixed cost, a fifth of a
  fast action).
- `game.bare_steps_per_s_fast`, `game.rollout_steps_per_s_fast`: the same with the fast renderer (fast_view.py);
  `game.bare_speedup_fast` (target >= 3) and `game.rollout_speedup_fast`: over the pygame renderer's;
  `game.collector_efficiency_fast`: rollout over bare game with the fast renderer (informational);
- `game.collector_efficiency_without_network[_fast]`: the same rollout replaying the recorded actions with no
  network (nothing decides, no weights fetched) over the bare game: what the collector adds beyond the game and the
  network. The regression guard (DESIGN §5, target >= 0.85) is on the default game's, `..._fast`;
- `game.decision_ms_per_action[_fast]`: the decision's own cost per action in a collector's rollout (its
  exploration_policy stage: the acting program's forward and the exploration policy around it), with its share of
  the action and the weights fetch's cost per action (`update_network_ms_per_action`) beside it;
  `game.rollout_share` and `game.rollout_share_fast`: each stage's share of an action's time in a rollout (physics,
  floats, render, convert_frame, the decision (exploration_policy), update_network, bookkeeping).
`game.render_ms`, `game.render_ms_gymnasium_road` and `game.render_speedup`: our pygame render against the same
env drawing the road with CarRacing's own code; `game.render_ms_fast` (target <= 0.5 ms at 64 x 64) and
`game.render_speedup_fast` (target >= 10): the fast renderer's frame against the pygame frame (see
`_render_figures`); `game.decision_us_after_render` and `game.decision_us_after_render_forward`: a collector's
decision right after a render, through its acting program and through the TorchScript forward, and
`..._forward_bfloat16` through the learning step's bfloat16 mixed precision (see `_decision_figures`);
`game.bfloat16_acting_same_action_fraction`: how often that bfloat16 path picks the shipped model's float32 greedy
action in its own races (see `_bfloat16_agreement`); `game.fast_frame_*`: how close the fast renderer's frames are
to the pygame ones, and how often the shipped model acts the same on both (frame_fidelity.py).
Also the rollout's per-stage timings (`game.rollout_ns_per_action[_fast].<stage>`), the bare game's
(`game.bare_ns_per_action[_fast].render|physics`), and the game's own stages (physics, render, grey conversion)
timed where the collector's work runs between them, over the same in the bare game (median of paired repetitions,
`by_stage` for physics and render): `game.game_stages_slowdown_in_rollout[_fast]` in a collector's rollout,
`game.game_stages_slowdown_without_network[_fast]` in the rollout without the network, and
`game.game_stages_slowdown_bare_with_network_fast` in the bare game with only the network's work (a decision after
each frame, the weights fetched as in a rollout) between its stages: the part of the collector's cost that its own
stages do not show, and which of its works causes it.
Each repetition measures all back to back, in rotated order; rates are medians over repetitions of wall-clock
rates; a ratio line's value is the median of its per-repetition ratios (`median_of_paired_ratios`; its
`ratio_of_medians` beside it), and it also gives the ratio from the process's CPU time (`cpu_time_ratio`), which
other processes on a shared machine disturb less.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import cv2
import numpy as np
import torch
import torch.multiprocessing as torch_mp
from gymnasium.envs.box2d import car_racing as gym_car_racing

from trackmania_rl.agents.acting import acting_torch_settings, make_inference_network
from trackmania_rl.agents.iqn import IQNNetwork, make_network
from trackmania_rl.agents.policy import CollectorPolicy
from trackmania_rl.benchmarks import frame_fidelity
from trackmania_rl.config.loader import default_config
from trackmania_rl.evaluation.evaluate import EvaluationError, open_policy
from trackmania_rl.games.base import MapSpec
from trackmania_rl.games.car_racing.driver import centerline_follower
from trackmania_rl.games.car_racing.env import CarRacingEnv, frame_render_size
from trackmania_rl.games.car_racing.floats import make_float_layout
from trackmania_rl.games.car_racing.instance import CarRacingGameInstance
from trackmania_rl.rollouts.greedy import play_race
from trackmania_rl.rollouts.local.shared_network import SharedNetwork

SEEDS = (0, 1, 2, 3)
SHIPPED_WEIGHTS = Path(__file__).resolve().parents[2] / "models" / "carracing_default" / "weights.torch"
AGREEMENT_SEEDS = (500000, 500001, 500002)  # final test seeds: nothing is selected on them here
STAGES = ("reset", "physics", "floats", "render", "convert_frame", "exploration_policy", "update_network", "bookkeeping")
GAME_STAGES = ("physics", "render", "convert_frame")  # the bare game's own, timed in both


def make_policy(cfg, layout, n_actions: int):
    """A collector's own acting path: `CollectorPolicy` (Inferer acting through the inference network's
    acting program at iqn_k midpoint quantiles, batch 1) over a real `SharedNetwork` in shared memory (spawn
    context, as scripts/train.py builds it), holding a freshly initialised network of the config's sizes.

    Returns (policy, update_network, shared). `policy(frame, state_float)` pays for the network's decision
    and plays `policy.drive(frame, state_float)` instead (the benchmark drives with the centerline
    follower's actions so that the car follows the track), reporting it greedy when it is the network's
    argmax. `policy.start_race(drive)` sets that driver for the coming race.
    `update_network()` is the collector's: the rollout calls it every
    update_inference_network_every_n_actions actions; before each call the collector forgets the version it
    holds (as if the learner had published: its publish is not the collector's cost), so every call copies
    the shared weights into the acting network, as a collector does whenever the learner has published:
    the collector's worst case."""
    shared = SharedNetwork(make_network(cfg, layout, n_actions, "cpu"), torch_mp.get_context("spawn"))
    shared.publish(1, shared.network.state_dict())
    collector = CollectorPolicy(cfg, layout, n_actions, shared)

    def policy(frame, state_float):
        _, _, value, q_values = collector(frame, state_float)
        action = policy.drive(frame, state_float)
        return action, action == int(q_values.argmax()), value, q_values

    def update_network():
        collector.version = -1  # "the learner published": the collector's fetch copies
        collector.update_network()

    def start_race(drive):  # what a collector does before each race (greedy: `drive` decides anyway)
        policy.drive = drive
        collector.start_race(cfg, 0, explore=False)

    policy.start_race = start_race
    return policy, update_network, shared


def play_bare(game: CarRacingGameInstance, seed: int, actions, decide=None, update_network=None) -> dict:
    """The game alone playing `actions` on `seed`: reset, then per action one frame (drawn by the game's renderer,
    as the network gets it) and the physics steps of one action, through the rollout's own env. With `decide`
    (`decide(frame, state_float)`, its answer unused) and `update_network` (called every
    update_inference_network_every_n_actions actions, as the rollout does), the network's work runs between the
    game's stages as in a rollout, without the rest of the collector. Returns ns per action of each stage timed
    (GAME_STAGES, and exploration_policy with `decide`), clocked as the rollout clocks them."""
    env, controls, cfg = game.env, game.controls, game.cfg
    steps, update_every = cfg.physics_steps_per_action, cfg.update_inference_network_every_n_actions
    state_float = game.float_layout.mean.astype(np.float32)  # the floats do not change the network's work
    clock = time.perf_counter_ns
    timings = dict.fromkeys(GAME_STAGES, 0)
    env.reset(seed=seed)
    for k, action in enumerate(actions):
        if update_network is not None and k % update_every == 0:
            update_network()
        frame = game.render_frame(timings)  # adds to render and convert_frame
        if decide is not None:
            t0 = clock()
            decide(frame, state_float)
            timings["exploration_policy"] = timings.get("exploration_policy", 0) + clock() - t0
        t0 = clock()
        control = controls[action]
        for _ in range(steps):
            env.step(control)
        timings["physics"] += clock() - t0
    return {stage: ns / len(actions) for stage, ns in timings.items()}


def timed(play) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds of this process, result) of play()."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = play()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def _measure(cfg, games: dict[str, CarRacingGameInstance], repetitions: int):
    """The contenders below, back to back per repetition; `games`: the same game drawn by each renderer ("pygame",
    "fast"), the races of both played from the same recorded actions."""
    game = games["pygame"]
    layout = game.float_layout
    follower = centerline_follower(cfg, layout)
    network_policy, update_network, _shared = make_policy(cfg, layout, len(cfg.inputs))

    def no_network_to_update():
        pass

    # An untimed rollout per seed, the follower driving, records the actions that every timed run of
    # that seed replays (bare game and rollouts alike); it also warms up.
    maps, recorded = {}, {}
    for seed in SEEDS:
        maps[seed] = MapSpec(f"seed{seed}", seed)
        network_policy.start_race(lambda frame, state_float: int(follower(frame, state_float)[0]))
        results, _ = game.rollout(network_policy, maps[seed], game.zone_centers_for(maps[seed]), update_network)
        recorded[seed] = results["actions"]

    def replaying(seed):
        """A driver playing the recorded actions of `seed` in turn."""
        actions = iter(recorded[seed])

        def drive(frame, state_float):
            action = next(actions, None)
            if action is None:
                raise RuntimeError(f"seed {seed}: the race went on past its recording: the game is not deterministic")
            return action

        return drive

    def replay_without_network(seed):
        """A policy playing the recorded actions, deciding nothing (the game side's own overhead)."""
        drive, q_values = replaying(seed), np.zeros(len(cfg.inputs), dtype=np.float32)
        return lambda frame, state_float: (drive(frame, state_float), True, 0.0, q_values)

    def rollout(policy, seed, update, game=game):
        results, stats = game.rollout(policy, maps[seed], game.zone_centers_for(maps[seed]), update)
        if results["actions"] != recorded[seed]:
            raise RuntimeError("a benchmark rollout ended before its recording did: the game is not deterministic")
        return stats

    def collector_rollout(seed, renderer="pygame"):
        network_policy.start_race(replaying(seed))
        return rollout(network_policy, seed, update_network, games[renderer])

    def bare_with_network(seed, renderer="fast"):
        network_policy.start_race(lambda frame, state_float: 0)  # only the network's work: nothing is played
        return play_bare(games[renderer], seed, recorded[seed], network_policy, update_network)

    # seven ways to play the same race; each repetition runs them back to back in a rotated order so that drifts in
    # machine load hit all alike
    contenders = {
        "bare": lambda seed: play_bare(game, seed, recorded[seed]),
        "rollout": collector_rollout,
        "rollout_without_network": lambda seed: rollout(replay_without_network(seed), seed, no_network_to_update),
        "bare_fast": lambda seed: play_bare(games["fast"], seed, recorded[seed]),
        "rollout_fast": lambda seed: collector_rollout(seed, "fast"),
        "rollout_without_network_fast": lambda seed: rollout(replay_without_network(seed), seed, no_network_to_update, games["fast"]),
        "bare_with_network_fast": bare_with_network,
    }
    wall_rates = {name: [] for name in contenders}
    cpu_rates = {name: [] for name in contenders}
    stage_ns = {name: {} for name in contenders}  # contender -> stage -> ns per action, one per repetition
    for rep in range(repetitions):
        seed = SEEDS[rep % len(SEEDS)]
        for name in in_turn(list(contenders), rep):
            wall, cpu, stats = timed(lambda name=name, seed=seed: contenders[name](seed))
            wall_rates[name].append(len(recorded[seed]) / wall)
            cpu_rates[name].append(len(recorded[seed]) / cpu)
            if name.startswith("rollout"):
                stats = {stage: stats[f"instrumentation__{stage}"] for stage in STAGES}
            for stage, ns in stats.items():
                stage_ns[name].setdefault(stage, []).append(ns)
    return recorded, wall_rates, cpu_rates, stage_ns


def run(args):
    quick = getattr(args, "quick", False)
    # Many short races (cut off after race_ms of game time) rather than a few laps: on a machine
    # shared with other work, medians over many short paired runs are steadier than over a few long.
    race_ms, repetitions = (5_000, 4) if quick else (10_000, 24)
    cfg = default_config().replace(cutoff_rollout_if_race_not_finished_within_duration_ms=race_ms, frame_renderer="pygame")
    games = {"pygame": CarRacingGameInstance(cfg), "fast": CarRacingGameInstance(cfg.replace(frame_renderer="fast"))}
    try:
        # the collector's torch settings (1 thread, batch-1 convolutions without oneDNN), restored after
        with acting_torch_settings():
            recorded, wall_rates, cpu_rates, stage_ns = _measure(cfg, games, repetitions)
    finally:
        for game in games.values():
            game.close()

    median = {name: statistics.median(values) for name, values in wall_rates.items()}
    cpu_median = {name: statistics.median(values) for name, values in cpu_rates.items()}
    common = {
        "repetitions": repetitions,
        "physics_steps_per_action": cfg.physics_steps_per_action,
        "race_ms": race_ms,
        "actions_per_race": {seed: len(actions) for seed, actions in recorded.items()},
    }
    yield {
        "figure": "game.bare_steps_per_s",
        "value": round(median["bare"], 2),
        "unit": "actions/s",
        "samples": [round(r, 2) for r in wall_rates["bare"]],
        **common,
    }
    yield {
        "figure": "game.rollout_steps_per_s",
        "value": round(median["rollout"], 2),
        "unit": "actions/s",
        "samples": [round(r, 2) for r in wall_rates["rollout"]],
        "policy": f"CollectorPolicy over a SharedNetwork, default config sizes, iqn_k {cfg.iqn_k}, 1 CPU thread, batch 1, "
        f"oneDNN off, weights fetched every {cfg.update_inference_network_every_n_actions} actions, acting program (MeanQAtFixedTaus)",
        **common,
    }
    for figure, name in (("game.bare_steps_per_s_fast", "bare_fast"), ("game.rollout_steps_per_s_fast", "rollout_fast")):
        yield {
            "figure": figure,
            "value": round(median[name], 2),
            "unit": "actions/s",
            "samples": [round(r, 2) for r in wall_rates[name]],
            "frame_renderer": "fast",
            **common,
        }
    for figure, name, base, extra in (
        # informational: the network's decision, a fixed cost, weighs more beside the cheaper fast game
        ("game.collector_efficiency", "rollout", "bare", {}),
        ("game.collector_efficiency_fast", "rollout_fast", "bare_fast", {}),
        # the same without the network (nothing decides): what the collector adds beyond the game and the network;
        # the regression guard, on the default (fast) game
        ("game.collector_efficiency_without_network", "rollout_without_network", "bare", {}),
        ("game.collector_efficiency_without_network_fast", "rollout_without_network_fast", "bare_fast", {"target": ">= 0.85"}),
        # the fast renderer's game against the pygame one's: the bare game, and a collector's rollout
        ("game.bare_speedup_fast", "bare_fast", "bare", {"target": ">= 3"}),
        ("game.rollout_speedup_fast", "rollout_fast", "rollout", {}),
    ):
        paired = [r / b for r, b in zip(wall_rates[name], wall_rates[base], strict=True)]  # one of each per repetition
        yield {
            "figure": figure,
            # the median of the per-repetition ratios: one slow moment of the machine moves one pair, not a median
            "value": round(statistics.median(paired), 4),
            "unit": "ratio",
            **extra,
            "median_of_paired_ratios": round(statistics.median(paired), 4),
            "ratio_of_medians": round(median[name] / median[base], 4),
            "per_repetition": [round(r, 4) for r in paired],
            # the same from this process's CPU time: insensitive to other processes taking the CPU
            "cpu_time_ratio": round(cpu_median[name] / cpu_median[base], 4),
        }
    for name, suffix in (("rollout", ""), ("rollout_fast", "_fast")):
        medians = {stage: statistics.median(stage_ns[name][stage]) for stage in STAGES}
        for stage in STAGES:
            yield {"figure": f"game.rollout_ns_per_action{suffix}.{stage}", "value": round(medians[stage]), "unit": "ns/action"}
        total = sum(medians.values())
        # where an action's time goes now: the next bottleneck
        yield {
            "figure": f"game.rollout_share{suffix}",
            "value": {stage: round(ns / total, 4) for stage, ns in medians.items()},
            "unit": "fraction of an action's time (medians per stage)",
            "us_per_action": round(total / 1e3, 1),
        }
        # the decision's own cost: the collector policy's call (the acting program's forward at iqn_k fractions, and
        # the exploration policy around it), per action of a rollout
        decision = stage_ns[name]["exploration_policy"]
        shares = [d / sum(stage_ns[name][s][rep] for s in STAGES) for rep, d in enumerate(decision)]
        yield {
            "figure": f"game.decision_ms_per_action{suffix}",
            "value": round(statistics.median(decision) / 1e6, 4),
            "unit": "ms/action",
            "share_of_action": round(statistics.median(shares), 4),
            "update_network_ms_per_action": round(statistics.median(stage_ns[name]["update_network"]) / 1e6, 4),
            "per_repetition": [round(d / 1e6, 4) for d in decision],
        }
    for name, suffix in (("bare", ""), ("bare_fast", "_fast")):
        for stage in ("render", "physics"):
            value = round(statistics.median(stage_ns[name][stage]))
            yield {"figure": f"game.bare_ns_per_action{suffix}.{stage}", "value": value, "unit": "ns/action"}

    # The game's own stages (physics, render, grey conversion) timed inside a rollout, with and without the network,
    # and in the bare game with only the network's work between them, each over the same stages of the bare game,
    # paired per repetition: which of the collector's works slows the game's stages down.
    def paired_slowdown(name, base, stages):
        return [sum(stage_ns[name][s][rep] for s in stages) / sum(stage_ns[base][s][rep] for s in stages) for rep in range(repetitions)]

    for figure, name, base in (
        ("game.game_stages_slowdown_in_rollout", "rollout", "bare"),
        ("game.game_stages_slowdown_in_rollout_fast", "rollout_fast", "bare_fast"),
        ("game.game_stages_slowdown_without_network", "rollout_without_network", "bare"),
        ("game.game_stages_slowdown_without_network_fast", "rollout_without_network_fast", "bare_fast"),
        ("game.game_stages_slowdown_bare_with_network_fast", "bare_with_network_fast", "bare_fast"),
    ):
        paired = paired_slowdown(name, base, GAME_STAGES)
        yield {
            "figure": figure,
            "value": round(statistics.median(paired), 4),
            "unit": "ratio",
            "by_stage": {s: round(statistics.median(paired_slowdown(name, base, (s,))), 4) for s in ("physics", "render")},
            "per_repetition": [round(r, 4) for r in paired],
        }
    yield from _render_figures(cfg, n_seeds=2 if quick else 6)
    yield from _decision_figures(cfg, n_seeds=2 if quick else 6)
    yield from _games_per_process_figures(cfg, seconds=2.0 if quick else 6.0)
    yield from frame_fidelity.run(SHIPPED_WEIGHTS, quick)


def _render_figures(cfg, n_seeds: int, actions_per_seed: int = 150):
    """`game.render_ms`: one render of our env (CarRacing's pygame drawing); `game.render_ms_gymnasium_road`: the same
    env drawing the road with CarRacing's own `_render_road` (its per-polygon on-screen test); `game.render_speedup`:
    their ratio. Both envs play the same random actions side by side, renders alternated, and every pair of frames is
    checked equal. `game.render_ms_fast`: the fast renderer's frame (fast_view.py) of the same states, drawn in a pass
    of its own (its env replays the same actions; interleaved with pygame's renders, which sweep ~3 MB of window
    through the CPU caches, it would pay for theirs); `game.render_speedup_fast`: the pygame frame (render + grey
    conversion) over it."""

    class GymnasiumRoad(CarRacingEnv):
        _render_road = gym_car_racing.CarRacing._render_road

    size = frame_render_size(cfg.H_downsized, cfg.W_downsized)
    frame_size = (cfg.H_downsized, cfg.W_downsized)
    envs = {"ours": CarRacingEnv(size), "gymnasium": GymnasiumRoad(size), "fast": CarRacingEnv(size, fast_frame_size=frame_size)}
    rng = np.random.default_rng(0)
    times = {name: [] for name in (*envs, "convert")}
    clock = time.perf_counter_ns
    try:
        for seed in range(n_seeds):
            controls = [np.array([rng.uniform(-1, 1), rng.uniform(0, 1), rng.uniform(0, 0.3)]) for _ in range(actions_per_seed)]
            for env in envs.values():
                env.reset(seed=seed)
            for k, control in enumerate(controls):
                frames = []
                for name in sorted(("ours", "gymnasium"), reverse=bool(k % 2)):
                    env = envs[name]
                    for _ in range(cfg.physics_steps_per_action):
                        env.step(control)
                    start = clock()
                    frames.append(env.render_state_pixels())
                    times[name].append(clock() - start)
                if not np.array_equal(frames[0], frames[1]):
                    raise RuntimeError(f"seed {seed}, action {k}: the road drawing changed the frame")
                start = clock()
                cv2.cvtColor(frames[0][: cfg.H_downsized], cv2.COLOR_RGB2GRAY)  # what makes the pygame view a frame
                times["convert"].append(clock() - start)
            fast = envs["fast"]
            for control in controls:
                for _ in range(cfg.physics_steps_per_action):
                    fast.step(control)
                start = clock()
                fast.render_fast_frame()
                times["fast"].append(clock() - start)
    finally:
        for env in envs.values():
            env.close()
    median_ms = {name: statistics.median(values) / 1e6 for name, values in times.items()}
    common = {"renders": len(times["ours"]), "render_size": list(size)}
    yield {"figure": "game.render_ms", "value": round(median_ms["ours"], 3), "unit": "ms", **common}
    yield {"figure": "game.render_ms_gymnasium_road", "value": round(median_ms["gymnasium"], 3), "unit": "ms", **common}
    yield {"figure": "game.render_speedup", "value": round(median_ms["gymnasium"] / median_ms["ours"], 3), "unit": "x"}
    fast = {"renders": len(times["fast"]), "frame_size": list(frame_size)}
    yield {"figure": "game.render_ms_fast", "value": round(median_ms["fast"], 4), "unit": "ms", "target": "<= 0.5 at 64 x 64", **fast}
    pygame_frame_ms = median_ms["ours"] + median_ms["convert"]
    yield {
        "figure": "game.render_speedup_fast",
        "value": round(pygame_frame_ms / median_ms["fast"], 2),
        "unit": "x",
        "target": ">= 10",
        "pygame_frame_ms": round(pygame_frame_ms, 4),
        "of_which_grey_conversion_ms": round(median_ms["convert"], 4),
        **fast,
    }


GAMES_PER_PROCESS = (1, 2, 4)


def in_turn(contenders: list, rep: int) -> list:
    """The contenders in repetition `rep`'s order, each one starting in turn, so that the machine's drift hits all alike."""
    shift = rep % len(contenders)
    return contenders[shift:] + contenders[:shift]


def _games_per_process_figures(cfg, seconds: float):
    """`game.games_per_process_actions_per_s`: K games played in one process (one core, the collector's torch
    settings), each action of each game its physics steps and its fast-renderer frame, and one decision per step for
    all K states: K = 1 through the collectors' batch-1 acting program, K > 1 through one batched forward of the
    TorchScript network (the mean Q at the fixed fractions), and through the batch-1 program K times for comparison.
    Actions per second of the process; `..._ratio_batched`: K games with a batched decision over one game (the
    collectors' path), the gain seed 000's batched decisions would bring (adopted at >= 1.2). The cars hold a fixed
    throttle and steering (the decisions are paid for, not played): the game work of every K is the same."""
    from trackmania_rl.agents.exploration import midpoint_taus

    layout = make_float_layout(cfg)
    fast_cfg = cfg.replace(frame_renderer="fast")
    with acting_torch_settings():
        network = make_inference_network(fast_cfg, layout, len(cfg.inputs), jit=True)
        network.load_state_dict_from(make_network(fast_cfg, layout, len(cfg.inputs), "cpu"))
        taus = midpoint_taus(cfg.iqn_k)
        acting = network.mean_q_at(taus)
        floats = layout.mean.astype(np.float32)
        frame_size = (cfg.H_downsized, cfg.W_downsized)
        size = frame_render_size(*frame_size)
        envs = [CarRacingEnv(size, fast_frame_size=frame_size) for _ in range(max(GAMES_PER_PROCESS))]
        control = np.array([0.1, 0.3, 0.0])

        def play(k: int, decide: str) -> float:
            for index, env in enumerate(envs[:k]):
                env.reset(seed=index)
            actions, started = 0, time.perf_counter()
            while time.perf_counter() - started < seconds:
                frames = []
                for env in envs[:k]:
                    for _ in range(cfg.physics_steps_per_action):
                        env.step(control)
                    frames.append(env.render_fast_frame())
                if decide == "batched":
                    with torch.inference_mode():
                        img = torch.from_numpy(np.stack(frames))
                        network(img, torch.from_numpy(floats).expand(k, -1), cfg.iqn_k, taus)[0].mean(dim=1).numpy()
                else:
                    for frame in frames:
                        acting(frame, floats)
                actions += k
            return actions / (time.perf_counter() - started)

        rates = {(k, decide): [] for k in GAMES_PER_PROCESS for decide in ("each", "batched") if k > 1 or decide == "each"}
        try:
            for rep in range(3):
                for key in in_turn(list(rates), rep):
                    rates[key].append(play(*key))
        finally:
            for env in envs:
                env.close()
    one = statistics.median(rates[(1, "each")])
    for (k, decide), values in rates.items():
        yield {
            "figure": f"game.games_per_process_actions_per_s.k{k}_{decide}",
            "value": round(statistics.median(values), 1),
            "unit": "actions/s of one process",
            "samples": [round(v, 1) for v in values],
            "decision": "batch-1 acting program per state" if decide == "each" else f"one TorchScript forward at batch {k}",
        }
    for k in GAMES_PER_PROCESS[1:]:
        ratio = statistics.median(rates[(k, "batched")]) / one
        yield {"figure": f"game.games_per_process_ratio_batched.k{k}", "value": round(ratio, 3), "unit": "ratio", "adopt_at": ">= 1.2"}


def bfloat16_mean_q(network: IQNNetwork, taus: torch.Tensor):
    """`q(frame, state_float) -> (A,)`: the mean Q at fractions `taus` (1, N) for one state, computed as the
    learning step computes in bfloat16 (IQNNetwork.training_forward), oneDNN on for it (its faster case)."""

    def q(frame, state_float):
        img = torch.from_numpy(np.ascontiguousarray(frame)).unsqueeze(0)
        floats = torch.from_numpy(np.ascontiguousarray(state_float, dtype=np.float32)).unsqueeze(0)
        mkldnn = torch.backends.mkldnn.enabled
        torch.backends.mkldnn.enabled = True
        try:
            with torch.inference_mode():
                values, _ = network.training_forward(img, floats, taus.shape[1], torch.bfloat16, taus=taus)
        finally:
            torch.backends.mkldnn.enabled = mkldnn
        return values[0].mean(dim=0).numpy()

    return q


def time_decisions_after_render(cfg, paths: dict, n_seeds: int, actions_per_seed: int, agree: tuple[str, str]) -> dict[str, list[int]]:
    """ns per decision of each of `paths` (name -> `q(frame, state_float) -> (A,)`), each timed right after a render
    of its own, as in a rollout: the game drives with random actions on seeds 0..n_seeds-1, and after every action
    each path renders and decides in turn, in rotated order. The Q values of the two paths named in `agree` are
    checked equal to float rounding at every decision. Run it with the collector's torch settings."""
    game = CarRacingGameInstance(cfg)
    rng = np.random.default_rng(0)
    state_float = game.float_layout.mean.astype(np.float32)  # the floats do not change the work
    times = {name: [] for name in paths}
    names = sorted(paths)
    first, second = agree
    try:
        for seed in range(n_seeds):
            game.env.reset(seed=seed)
            for k in range(actions_per_seed):
                q = {}
                for name in names[k % len(names) :] + names[: k % len(names)]:
                    frame = game.render_frame()
                    start = time.perf_counter_ns()
                    q[name] = paths[name](frame, state_float)
                    times[name].append(time.perf_counter_ns() - start)
                if not np.allclose(q[first], q[second], rtol=1e-4, atol=1e-5):
                    raise RuntimeError(f"seed {seed}, action {k}: {first} and {second} disagree")
                control = game.controls[int(rng.integers(len(game.controls)))]
                for _ in range(cfg.physics_steps_per_action):
                    game.env.step(control)
    finally:
        game.close()
    return times


def _decision_figures(cfg, n_seeds: int, actions_per_seed: int = 150):
    """`game.decision_us_after_render`: one collector decision (`Inferer.get_exploration_action` through the
    acting program) right after a render, as in a rollout; `..._forward`: the same decision through the
    TorchScript forward at the same fractions (the path before the acting program); `..._forward_bfloat16`:
    through the learning step's bfloat16 mixed precision (`bfloat16_mean_q`). Alternated after every render in
    rotated order, with the collector's torch settings (`time_decisions_after_render`); all decide on every frame
    and the float32 paths' Q values are checked equal to float rounding."""
    layout = make_float_layout(cfg)
    with acting_torch_settings():
        shared = make_network(cfg, layout, len(cfg.inputs), "cpu")
        policy = CollectorPolicy(cfg, layout, len(cfg.inputs), SharedNetwork(shared, torch_mp.get_context("spawn")))
        inferer = policy.inferer
        paths = {
            "acting": lambda f, s: inferer.get_exploration_action(f, s)[3],
            "forward": lambda f, s: inferer.infer_network(f, s).mean(axis=0),
            "forward_bfloat16": bfloat16_mean_q(inferer.network.module, inferer.taus),
        }
        times = time_decisions_after_render(cfg, paths, n_seeds, actions_per_seed, agree=("acting", "forward"))
    median_us = {name: statistics.median(values) / 1e3 for name, values in times.items()}
    common = {"decisions": len(times["acting"]), "iqn_k": cfg.iqn_k, "threads": 1}
    yield {
        "figure": "game.decision_us_after_render",
        "value": round(median_us["acting"], 1),
        "unit": "us",
        "path": "acting program (MeanQAtFixedTaus)",
        **common,
    }
    yield {
        "figure": "game.decision_us_after_render_forward",
        "value": round(median_us["forward"], 1),
        "unit": "us",
        "path": "torch.jit.script forward",
        **common,
    }
    yield {
        "figure": "game.decision_us_after_render_forward_bfloat16",
        "value": round(median_us["forward_bfloat16"], 1),
        "unit": "us",
        "path": "IQNNetwork.training_forward in bfloat16 (the learning step's mixed precision), oneDNN on",
        **common,
    }
    yield from _bfloat16_agreement(cfg)


def _bfloat16_agreement(cfg):
    """`game.bfloat16_acting_same_action_fraction`: the shipped model (models/carracing_default) plays greedy
    races on AGREEMENT_SEEDS through its float32 acting program; at every decision the bfloat16 path
    (`bfloat16_mean_q`) is asked too, and the share of decisions where both pick the same action is the
    figure. Random weights would not do: their Q gaps are not a trained network's. Skipped when the shipped
    weights do not fit the default config."""
    try:
        policy = open_policy(weights=SHIPPED_WEIGHTS)
    except EvaluationError as e:
        yield {"figure": "game.bfloat16_acting_same_action_fraction", "value": None, "skipped": str(e)}
        return
    bfloat16_q = bfloat16_mean_q(policy.network, policy.inferer.taus)
    same, gaps, differences = [], [], []

    def observer(step, frame, state_float, decision):
        q = decision[3]
        q_bfloat16 = bfloat16_q(frame, state_float)
        same.append(int(np.argmax(q)) == int(np.argmax(q_bfloat16)))
        top_two = np.sort(q)[-2:]
        gaps.append(float(top_two[1] - top_two[0]))
        differences.append(float(np.abs(q - q_bfloat16).max()))

    game = CarRacingGameInstance(policy.cfg)
    try:
        with acting_torch_settings():
            for seed in AGREEMENT_SEEDS:
                play_race(game, policy, seed, observer)
    finally:
        game.close()
    yield {
        "figure": "game.bfloat16_acting_same_action_fraction",
        "value": round(sum(same) / len(same), 4),
        "unit": "fraction",
        "decisions": len(same),
        "seeds": list(AGREEMENT_SEEDS),
        "median_gap_best_to_second_q": round(statistics.median(gaps), 4),
        "median_max_abs_q_difference": round(statistics.median(differences), 4),
    }
