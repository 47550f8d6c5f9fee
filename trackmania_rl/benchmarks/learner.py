"""Learner figures (DESIGN §5), measured side by side in one run, batch 512, the default config's frame size.

- `learner.sample_ms`: one batch from the replay buffer (sampler + gather + mini-race transform), median;
- `learner.sample_ms_list_baseline`: the same batch from Linesight's layout, written here: a torchrl
  ReplayBuffer over a ListStorage of per-transition Python objects holding numpy arrays (frames shared
  between transitions, as Linesight's Experience references the rollout's frames), RandomSampler, and a
  per-field Python collate (np.stack per field, the mini-race transform in numpy, torch.as_tensor per
  field); measured alternately with the line above;
- `learner.sample_speedup` = baseline / ours (target >= 5);
- `learner.train_step_ms_bare`: one train step (forward, loss, backward, optimizer step) on a ready batch, per step
  of a run of RUN_STEPS steps launched as the learner launches them (agents/step_results.py: a captured step's
  results are read one step later, so the GPU has the next step queued);
- `learner.train_step_ms_full`: the same steps on the next batches of the learner's batch feed (learner/batches.py:
  sample + transform in the step's thread on the CPU; prefetched by its thread, in pinned memory, copied on its own
  stream, on CUDA); alternated with bare;
- `learner.overhead_ratio` = full / bare (target <= 1.10 on the CPU, <= 1.05 on a GPU);
- on CUDA, the same three for the step as captured CUDA graphs (`…_graph`) (all at the learner's interpreter switch
  interval, learner/cores.py), `learner.overhead_ratio_graph_by_switch_interval` (the graphed step's ratio at each
  candidate interval, taking turns), `learner.overhead_ratio_graph_by_steps_in_flight` (the same at 0, 1 and 2
  steps left unread after a launch; 0 is each step read at once), and `learner.cuda_graph_speedup` =
  bare eager / bare graph (target >= 1.5), and `learner.graph_step_by_batch`: the graphed step's ms and transitions/s
  at batch 128 to 2048 in float32 and bfloat16;
- `learner.bytes_per_transition`: replay memory held per transition at capacity (preallocated tensors:
  the state ring with its slack, the transition ring, the sampler's tree when prioritized), and
  `learner.bytes_per_transition_ratio` = that / (one frame + its floats) (target <= 1.25);
- `learner.inference_ms_p50`: one exploration-policy call of a collector (its acting program, batch 1,
  iqn_k quantiles, numpy in and out, warm caches); `learner.inference_ms_p50_forward` beside it: the
  TorchScript forward at the same fractions and the mean of its quantiles.
Also `learner.sample_ms_prioritized` (the prioritized sampler on the same storage) and
`learner.states_per_transition` (frames actually stored per transition after filling).
Torch runs on one thread (the learner's setting on 2 shared cores: more threads stall, see tests/), and glibc
keeps freed memory for reuse as in the learner (learner/allocator.py); the buffer is filled with synthetic
rollouts of random frames. `--device cuda` runs the train-step figures (bare, full, both precisions, FLOPs
fraction against that GPU's large-GEMM peak) on the GPU, with batches moved there as the learner moves them;
sampling and the collectors' inference stay on the CPU, where they run in training.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode
from torchrl.data import ListStorage, RandomSampler, ReplayBuffer

from trackmania_rl.agents.acting import make_inference_network
from trackmania_rl.agents.exploration import Inferer
from trackmania_rl.agents.graphed_step import GraphedTrainStep, set_capturable
from trackmania_rl.agents.iqn import make_network
from trackmania_rl.agents.precision import MIN_SPEEDUP
from trackmania_rl.agents.step_results import STEPS_LEFT_IN_FLIGHT, StepsInFlight
from trackmania_rl.agents.training import TAU_KEYS, Trainer, make_optimizer
from trackmania_rl.config.loader import default_config, frame_shape
from trackmania_rl.device import choose_device, cpu_model, wait_for_device
from trackmania_rl.games.car_racing.floats import make_float_layout
from trackmania_rl.games.float_layout import MINI_RACE_CLOCK
from trackmania_rl.learner.allocator import keep_freed_memory_for_reuse
from trackmania_rl.learner.batches import STEP_KEYS, make_batch_feed
from trackmania_rl.learner.cores import SWITCH_INTERVAL_CANDIDATES_S, learner_switch_interval, set_switch_interval
from trackmania_rl.replay.buffers import TransitionReplayBuffer, make_buffer
from trackmania_rl.replay.experience import Experience, rollout_to_experience
from trackmania_rl.replay.mini_race import MiniRaceTransform, draw_mini_race_clock
from trackmania_rl.replay.samplers import PrioritizedSampler

BATCH_SIZE = 512
ROUNDS_PER_CANDIDATE = 4  # the switch intervals (or depths) compared take turns this many times
STEPS_IN_FLIGHT_CANDIDATES = (0, 1, 2)
RUN_STEPS = 8  # steps timed together, each launched before the one before it is read (as in the learner)
CPU = torch.device("cpu")
ROLLOUT_STATES = 400


def synthetic_rollout(cfg, layout, rng: np.random.Generator, n_states: int = ROLLOUT_STATES) -> dict:
    n_actions = len(cfg.inputs)
    floats = rng.normal(size=(n_states, layout.dim)).astype(np.float32) * layout.std + layout.mean
    floats[:, layout.slice(MINI_RACE_CLOCK)] = 0.0
    frames = rng.integers(0, 256, size=(n_states, *frame_shape(cfg)), dtype=np.uint8)
    return {
        "frames": list(frames),
        "state_float": list(floats),
        "meters_advanced_along_centerline": list(np.cumsum(rng.uniform(0.0, 4.0, n_states))),
        "current_zone_idx": list(range(n_states)),
        "car_gear_and_wheels": [np.zeros(0, np.float32)] * n_states,
        "actions": list(rng.integers(0, n_actions, n_states)),
        "action_was_greedy": list(rng.random(n_states) < 0.95),
        "q_values": [np.zeros(n_actions, np.float32)] * n_states,
        "input_w": [True] * n_states,
        "furthest_zone_idx": n_states - 1,
        "road_tiles_touched": list(np.cumsum(rng.integers(0, 3, n_states))),
        "road_tiles_missed": list(np.cumsum(rng.random(n_states) < 0.01)),
    }


# ---------------------------------------------------------------------------------------------------------
# Linesight-style baseline: list of objects + per-field Python collate
# ---------------------------------------------------------------------------------------------------------


class ListExperience:
    __slots__ = (
        "state_img",
        "state_float",
        "state_potential",
        "action",
        "n_steps",
        "rewards",
        "gammas",
        "terminal_actions",
        "next_state_img",
        "next_state_float",
        "next_state_potential",
    )

    def __init__(self, **values):
        for name, value in values.items():
            setattr(self, name, value)


def to_list_storage(exp: Experience) -> list:
    frames = [exp.frames[k] for k in range(exp.n_states)]  # one array per frame, shared by the transitions using it
    floats = [exp.state_float[k] for k in range(exp.n_states)]
    items = []
    for i in range(len(exp)):
        s, ns = exp.state_index[i], exp.next_state_index[i]
        items.append(
            ListExperience(
                state_img=frames[s],
                state_float=floats[s],
                state_potential=float(exp.potential[s]),
                action=int(exp.action[i]),
                n_steps=int(exp.n_steps[i]),
                rewards=exp.rewards[i].copy(),
                gammas=exp.gammas[i].copy(),
                terminal_actions=float(exp.terminal_actions[i]),
                next_state_img=frames[ns],
                next_state_float=floats[ns],
                next_state_potential=float(exp.potential[ns]),
            )
        )
    return items


def list_baseline_collate(batch: list, rng: np.random.Generator, cfg, clock_index: int) -> dict:
    batch_size = len(batch)
    fields = {name: np.stack([getattr(e, name) for e in batch]) for name in ListExperience.__slots__}
    t = draw_mini_race_clock(
        rng, batch_size, cfg.temporal_mini_race_duration_actions, cfg.oversample_long_term_steps, cfg.oversample_maximum_term_steps
    )
    n = fields["n_steps"]
    horizon = cfg.temporal_mini_race_duration_actions
    m = n - np.maximum(0, t + n - horizon)
    terminal = (m >= fields["terminal_actions"]) | (t + n >= horizon)
    rows = np.arange(batch_size)
    gamma_eff = np.where(terminal, 0.0, fields["gammas"][rows, m - 1]).astype(np.float32)
    reward = (fields["rewards"][rows, m - 1] + gamma_eff * fields["next_state_potential"] - fields["state_potential"]).astype(np.float32)
    fields["state_float"][:, clock_index] = t
    fields["next_state_float"][:, clock_index] = t + n
    out = {name: fields[name] for name in ("state_img", "state_float", "action", "next_state_img", "next_state_float")}
    out.update(reward=reward, gamma_eff=gamma_eff, terminal=terminal, mini_race_clock=t, n_steps=n)
    return {k: torch.as_tensor(v) for k, v in out.items()}


# ---------------------------------------------------------------------------------------------------------


def _ms(seconds: list) -> float:
    return round(statistics.median(seconds) * 1000, 3)


def timed(fn, device: torch.device = CPU) -> float:
    """Seconds of `fn()`; on a GPU, from an idle device to the end of the work it queued."""
    wait_for_device(device)
    start = time.perf_counter()
    fn()
    wait_for_device(device)
    return time.perf_counter() - start


def gemm_peak_flops(dtype: torch.dtype, device: torch.device = CPU, reps: int = 7) -> float:
    """FLOP/s of one large square matrix product in `dtype` on this device (and thread count): its practical peak.
    A GPU needs a larger product than a CPU thread to reach it."""
    n = 8192 if device.type == "cuda" else 2048
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=g).to(device=device, dtype=dtype) for _ in range(2))
    a @ b
    return 2 * n**3 / statistics.median(timed(lambda: a @ b, device) for _ in range(reps))


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()


def on_device(buffer: TransitionReplayBuffer, cfg, layout, device: torch.device, seed: int, batch_size: int) -> TransitionReplayBuffer:
    """The same storage and sampler, with batches moved to `device` by the transform (as the learner's buffers)."""
    transform = MiniRaceTransform(cfg, layout, device=device, rng=np.random.default_rng(seed))
    return TransitionReplayBuffer(storage=buffer.storage, sampler=buffer.sampler, transform=transform, batch_size=batch_size)


def precision_figures(cfg, layout, n_actions: int, buffer, reps: int, device: torch.device = CPU):
    """At the shipped config's batch size: the full train step (sample + transform + step) in float32 and in
    bfloat16, alternated (`learner.bf16_speedup` = fp32 / bf16), and, in the dtype `training_precision = "auto"`
    would choose by the same rule, the FLOPs of one full step (torch.utils.flop_counter) per second of it, as a
    fraction of a large GEMM's FLOP/s in that dtype (`learner.flops_fraction_of_peak`)."""
    shipped = on_device(buffer, cfg, layout, device, seed=7, batch_size=cfg.batch_size)
    online, target = make_network(cfg, layout, n_actions, device), make_network(cfg, layout, n_actions, device)
    target.load_state_dict(online.state_dict())
    trainer = Trainer(online, target, make_optimizer(online, cfg, 1e-4), cfg, device)
    times = {torch.float32: [], torch.bfloat16: []}
    for round_index in range(2 + 2 * reps):
        for dtype, measured in times.items():
            trainer.precision = dtype
            seconds = timed(lambda: trainer.train_on_batch(shipped, True), device)
            if round_index >= 2:  # warm-up
                measured.append(seconds)
    fp32, bf16 = statistics.median(times[torch.float32]), statistics.median(times[torch.bfloat16])
    common = {"batch_size": cfg.batch_size, "threads": torch.get_num_threads(), "device": device_name(device)}
    yield {"figure": "learner.train_step_ms_full_float32", "value": round(1000 * fp32, 2), "unit": "ms", **common}
    yield {"figure": "learner.train_step_ms_full_bfloat16", "value": round(1000 * bf16, 2), "unit": "ms", **common}
    yield {"figure": "learner.bf16_speedup", "value": round(fp32 / bf16, 3), "unit": "x", "target": ">= 1.5 where bf16 is native", **common}
    dtype = torch.bfloat16 if fp32 / bf16 >= MIN_SPEEDUP else torch.float32
    trainer.precision = dtype
    with FlopCounterMode(display=False) as counter:
        trainer.train_on_batch(shipped, True)
    step_flops = counter.get_total_flops()
    peak = gemm_peak_flops(dtype, device)
    step_s = bf16 if dtype == torch.bfloat16 else fp32
    yield {"figure": "learner.train_step_gflop", "value": round(step_flops / 1e9, 3), "unit": "GFLOP", **common}
    yield {"figure": "learner.gemm_peak_gflops", "value": round(peak / 1e9, 1), "unit": "GFLOP/s", "dtype": str(dtype), **common}
    yield {
        "figure": "learner.flops_fraction_of_peak",
        "value": round(step_flops / step_s / peak, 3),
        "unit": "fraction",
        "target": ">= 0.5",
        "dtype": str(dtype),
        **common,
    }


SWEPT_BATCH_SIZES = (128, 256, 512, 1024, 2048)


def batch_size_figures(cfg, layout, n_actions: int, buffer, reps: int, device: torch.device):
    """CUDA: the captured-graph step on ready batches of each size of SWEPT_BATCH_SIZES in float32 and bfloat16,
    as ms per step and transitions learned per second (`learner.graph_step_by_batch`): what a GPU learner's
    batch size costs: the throughput side of choosing it (docs/results.md, "one GPU box")."""
    steps = {}
    for dtype in (torch.float32, torch.bfloat16):
        for batch_size in SWEPT_BATCH_SIZES:
            trainer = make_trainer(cfg, layout, n_actions, device, cuda_graphs=True)
            trainer.precision = dtype
            sampled = on_device(buffer, cfg, layout, torch.device("cpu"), seed=11, batch_size=batch_size).sample_batch()
            sampled.update(trainer.draw_taus(batch_size, torch.Generator().manual_seed(0)))
            ready = {k: v.to(device) for k, v in sampled.items() if k in STEP_KEYS + TAU_KEYS}
            _steps(trainer, lambda b=ready: b, 3)
            ms = 1000 * statistics.median(_timed_steps(trainer, lambda b=ready: b, device) for _ in range(2 * reps))
            steps[f"{str(dtype).removeprefix('torch.')}_{batch_size}"] = {
                "ms": round(ms, 3),
                "transitions_per_s": round(batch_size / ms * 1000),
            }
            del trainer, ready
    yield {"figure": "learner.graph_step_by_batch", "value": steps, "unit": "ms, transitions/s", "device": device_name(device)}


def _steps(trainer: Trainer, next_batch, count: int, depth: int = STEPS_LEFT_IN_FLIGHT) -> None:
    """`count` learning steps on `next_batch()`, launched and read as the learner does (`depth` steps left unread
    after each launch; 0: each step read at once)."""
    in_flight = StepsInFlight(depth)
    for _ in range(count):
        in_flight.add(trainer.launch_on_tensors(next_batch(), True))
    in_flight.drain()


def _timed_steps(trainer: Trainer, next_batch, device: torch.device, depth: int = STEPS_LEFT_IN_FLIGHT) -> float:
    """Seconds per step of a run of RUN_STEPS steps, from an idle device to the last step's end."""
    return timed(lambda: _steps(trainer, next_batch, RUN_STEPS, depth), device) / RUN_STEPS


def _bare_and_full(trainer: Trainer, feed, reps: int, device: torch.device, depth: int = STEPS_LEFT_IN_FLIGHT) -> tuple[list, list]:
    """Seconds per step of `reps` runs on one ready batch (bare) and on the feed's next batches (full), alternated."""
    ready = feed.next()[1]
    _steps(trainer, lambda: ready, 2, depth), _steps(trainer, lambda: feed.next()[1], 2, depth)
    bare, full = [], []
    for _ in range(reps):
        bare.append(_timed_steps(trainer, lambda: ready, device, depth))
        full.append(_timed_steps(trainer, lambda: feed.next()[1], device, depth))
    return bare, full


def overhead_by(trainer: Trainer, buffer, no_test_batches, cfg, device: torch.device, reps: int, candidates: dict) -> dict:
    """The graphed step's bare and full times and overhead ratio for each candidate {label: (interpreter switch
    interval, steps left in flight)}, the candidates taking turns over ROUNDS_PER_CANDIDATE rounds."""
    times = {label: ([], []) for label in candidates}
    feed = make_batch_feed(buffer, no_test_batches, trainer, device, np.random.default_rng(10), lambda: cfg)
    try:
        for _ in range(ROUNDS_PER_CANDIDATE):
            for label, (interval, depth) in candidates.items():
                sys.setswitchinterval(interval)
                bare, full = _bare_and_full(trainer, feed, max(1, reps // ROUNDS_PER_CANDIDATE), device, depth)
                times[label][0].extend(bare)
                times[label][1].extend(full)
    finally:
        feed.close()
        set_switch_interval(device)
    return {
        label: {"overhead_ratio": round(statistics.median(full) / statistics.median(bare), 3), "bare_ms": _ms(bare), "full_ms": _ms(full)}
        for label, (bare, full) in times.items()
    }


def candidate_figures(trainer: Trainer, buffer, no_test_batches, cfg, device: torch.device, reps: int):
    """The graphed step's overhead ratio at each candidate interpreter switch interval (learner/cores.py: the
    measurement behind CUDA_SWITCH_INTERVAL_S), then at 0, 1 and 2 steps left in flight at the learner's interval
    (agents/step_results.py: 0 is each step read at once, one synchronisation a step as before 1765f02, though
    after the optimizer graph instead of between the two graphs; the measurement behind STEPS_LEFT_IN_FLIGHT)."""
    common = {"batch_size": BATCH_SIZE, "device": device_name(device)}
    learners = learner_switch_interval(device)
    intervals = {f"{1000 * i:g}": (i, STEPS_LEFT_IN_FLIGHT) for i in SWITCH_INTERVAL_CANDIDATES_S}
    yield {
        "figure": "learner.overhead_ratio_graph_by_switch_interval",
        "value": overhead_by(trainer, buffer, no_test_batches, cfg, device, reps, intervals),
        "unit": "switch interval ms: x, ms",
        "learner_switch_interval_ms": 1000 * learners,
        "steps_in_flight": STEPS_LEFT_IN_FLIGHT,
        **common,
    }
    depths = {str(depth): (learners, depth) for depth in STEPS_IN_FLIGHT_CANDIDATES}
    yield {
        "figure": "learner.overhead_ratio_graph_by_steps_in_flight",
        "value": overhead_by(trainer, buffer, no_test_batches, cfg, device, reps, depths),
        "unit": "steps left in flight: x, ms",
        "learner_steps_in_flight": STEPS_LEFT_IN_FLIGHT,
        "switch_interval_ms": 1000 * learners,
        **common,
    }


def make_trainer(cfg, layout, n_actions: int, device: torch.device, cuda_graphs: bool = False) -> Trainer:
    """A Trainer on fresh networks of the config (float32), eager or as captured CUDA graphs."""
    online, target = make_network(cfg, layout, n_actions, device), make_network(cfg, layout, n_actions, device)
    target.load_state_dict(online.state_dict())
    trainer = Trainer(online, target, make_optimizer(online, cfg, 1e-4), cfg, device)
    if cuda_graphs:
        set_capturable(trainer.optimizer, True)
        trainer.graphed = GraphedTrainStep(trainer, log=lambda m: None)
    return trainer


def run(args):
    quick = bool(getattr(args, "quick", False))
    device = choose_device(getattr(args, "device", None) or "cpu")  # of the train-step figures; a bad name fails here
    torch.set_num_threads(1)
    keep_freed_memory_for_reuse()
    cfg = default_config()
    layout = make_float_layout(cfg)
    n_actions = len(cfg.inputs)
    capacity = cfg.memory_size_schedule[0][1][0]  # the first capacity of the schedule, quick or not
    sample_reps, train_reps, inference_reps = (80, 4, 100) if quick else (300, 15, 500)
    common = {
        "batch_size": BATCH_SIZE,
        "frame": list(frame_shape(cfg)),
        "float_dim": layout.dim,
        "threads": torch.get_num_threads(),
    }

    rng = np.random.default_rng(0)
    buffer = make_buffer(cfg, layout, capacity, batch_size=BATCH_SIZE, prioritized=False, rng=np.random.default_rng(1))
    baseline: list = []
    while len(buffer) < capacity:
        exp = rollout_to_experience(synthetic_rollout(cfg, layout, rng), cfg, layout, gamma=0.999)
        buffer.extend(exp)
        baseline.extend(to_list_storage(exp))
    clock_index = layout.slice(MINI_RACE_CLOCK).start
    collate_rng = np.random.default_rng(2)
    list_buffer = ReplayBuffer(
        storage=ListStorage(capacity),
        sampler=RandomSampler(),
        collate_fn=lambda batch: list_baseline_collate(batch, collate_rng, cfg, clock_index),
        batch_size=BATCH_SIZE,
    )
    list_buffer.extend(baseline[-capacity:])
    del baseline

    # sampling, alternated
    for _ in range(3):
        buffer.sample_batch(), list_buffer.sample()
    ours, theirs = [], []
    for _ in range(sample_reps):
        ours.append(timed(buffer.sample_batch))
        theirs.append(timed(list_buffer.sample))
    yield {"figure": "learner.sample_ms", "value": _ms(ours), "unit": "ms", "capacity": capacity, **common}
    yield {"figure": "learner.sample_ms_list_baseline", "value": _ms(theirs), "unit": "ms", "capacity": capacity, **common}
    yield {
        "figure": "learner.sample_speedup",
        "value": round(statistics.median(theirs) / statistics.median(ours), 2),
        "unit": "x",
        "target": ">= 5",
    }

    prioritized_sampler = PrioritizedSampler(buffer.storage, 0.6, 0.4, 1e-3, rng=np.random.default_rng(3))
    prioritized = TransitionReplayBuffer(
        storage=buffer.storage,
        sampler=prioritized_sampler,
        transform=MiniRaceTransform(cfg, layout, rng=np.random.default_rng(4)),
        batch_size=BATCH_SIZE,
    )
    slots = torch.from_numpy(buffer.storage.physical_order())
    prioritized_sampler.extend(slots)
    prioritized.update_priority(slots, torch.from_numpy(np.random.default_rng(5).exponential(size=len(slots))))
    prioritized_ms = [timed(prioritized.sample_batch) for _ in range(sample_reps)]
    yield {"figure": "learner.sample_ms_prioritized", "value": _ms(prioritized_ms), "unit": "ms", **common}

    # memory
    one_state = cfg.H_downsized * cfg.W_downsized + 4 * layout.dim
    per_transition = buffer.nbytes() / buffer.capacity
    yield {"figure": "learner.bytes_per_transition", "value": round(per_transition, 1), "unit": "bytes", "frame_plus_floats": one_state}
    yield {"figure": "learner.bytes_per_transition_ratio", "value": round(per_transition / one_state, 3), "unit": "x", "target": "<= 1.25"}
    yield {
        "figure": "learner.states_per_transition",
        "value": round(buffer.storage.states_written / buffer.storage.transitions_written, 4),
        "unit": "frames",
    }

    # train step: bare (ready tensors) and full (the learner's batch feed: sampled in the step's thread on the CPU,
    # prefetched on CUDA), alternated; on CUDA the same for the captured-graph step
    step_common = {**common, "device": device_name(device)}
    set_switch_interval(device)  # the learner's interpreter switch interval on this device (learner/cores.py)
    steppers = {"": make_trainer(cfg, layout, n_actions, device)}
    if device.type == "cuda":
        steppers["_graph"] = make_trainer(cfg, layout, n_actions, device, cuda_graphs=True)
    no_test_batches = make_buffer(cfg, layout, 1, batch_size=BATCH_SIZE, rng=np.random.default_rng(9))
    bare_ms = {}
    for suffix, trainer in steppers.items():
        feed = make_batch_feed(buffer, no_test_batches, trainer, device, np.random.default_rng(8), lambda: cfg)
        try:
            # a graphed step takes ~2 ms: more runs for a steadier ratio (two quick runs of 4 gave 1.02 and 1.19)
            bare, full = _bare_and_full(trainer, feed, train_reps if suffix == "" else 5 * train_reps, device)
        finally:
            feed.close()
        bare_ms[suffix] = statistics.median(bare)
        shape = {"iqn_n": cfg.iqn_n, "use_ddqn": cfg.use_ddqn}
        interval_ms = {"switch_interval_ms": 1000 * learner_switch_interval(device)}
        yield {"figure": f"learner.train_step_ms_bare{suffix}", "value": _ms(bare), "unit": "ms", **shape, **step_common}
        yield {"figure": f"learner.train_step_ms_full{suffix}", "value": _ms(full), "unit": "ms", **step_common, **interval_ms}
        yield {
            "figure": f"learner.overhead_ratio{suffix}",
            "value": round(statistics.median(full) / statistics.median(bare), 3),
            "unit": "x",
            "target": "<= 1.10 (CPU), <= 1.05 (GPU)",
            **interval_ms,
        }
    if "_graph" in steppers:
        yield from candidate_figures(steppers["_graph"], buffer, no_test_batches, cfg, device, 20 if quick else 60)
    if "_graph" in bare_ms:
        speedup = bare_ms[""] / bare_ms["_graph"]
        yield {"figure": "learner.cuda_graph_speedup", "value": round(speedup, 3), "unit": "x", "target": ">= 1.5", **step_common}
    yield from precision_figures(cfg, layout, n_actions, buffer, train_reps, device)
    if device.type == "cuda":
        yield from batch_size_figures(cfg, layout, n_actions, buffer, train_reps, device)

    # inference, batch 1, warm: a collector's decision (the acting program) and the TorchScript forward it
    # replaces (quantiles at the same fractions, then their mean), alternated
    frame = rng.integers(0, 256, size=frame_shape(cfg), dtype=np.uint8)
    floats = layout.mean.copy()
    collector_net = make_inference_network(cfg, layout, n_actions, jit=True)
    collector_net.load_state_dict_from(steppers[""].online)
    policy = Inferer(collector_net, cfg, n_actions, rng=np.random.default_rng(6))
    policy.set_exploration(0.03, 0.1)
    contenders = {
        "acting": lambda: policy.get_exploration_action(frame, floats),
        "forward": lambda: policy.infer_network(frame, floats).mean(axis=0),
    }
    for run in contenders.values():
        for _ in range(20):
            run()
    times = {name: [] for name in contenders}
    for _ in range(inference_reps):
        for name, run in contenders.items():
            times[name].append(timed(run))
    yield {
        "figure": "learner.inference_ms_p50",
        "value": _ms(times["acting"]),
        "unit": "ms",
        "path": "acting program (MeanQAtFixedTaus)",
        "iqn_k": cfg.iqn_k,
        "threads": torch.get_num_threads(),
    }
    yield {
        "figure": "learner.inference_ms_p50_forward",
        "value": _ms(times["forward"]),
        "unit": "ms",
        "path": "torch.jit.script forward",
        "iqn_k": cfg.iqn_k,
        "threads": torch.get_num_threads(),
    }
