"""The learning step's precision: float32, or bfloat16 mixed precision where this machine runs it faster.

CPU flags alone mislead: an AMD EPYC with avx512_bf16 ran bf16 matrix products ~4.4x faster than fp32 and the
IQN step 2.2-3.0x faster, while an Intel Xeon without AMX, with the same flag, ran bf16 slower than fp32. So
`training_precision = "auto"` times the real train step (Trainer.train_on_tensors, on networks of the run's
architecture, at its batch size) both ways at start-up and keeps bfloat16 only when it is clearly faster.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from trackmania_rl.agents.iqn import make_network
from trackmania_rl.agents.training import Trainer, make_optimizer
from trackmania_rl.config.loader import frame_shape
from trackmania_rl.deferred_signals import DeferredSignals
from trackmania_rl.device import wait_for_device

PRECISIONS = {"float32": torch.float32, "bfloat16": torch.bfloat16}
PROBE_WARMUP_STEPS = 2  # per precision: first steps pay for allocation and kernel selection
PROBE_TIMED_ROUNDS = 5  # alternated fp32 / bf16 steps, medians compared
MIN_SPEEDUP = 1.1  # bfloat16 must beat float32 by this much to be chosen (the probe's own noise is a few %)


@dataclass(frozen=True)
class PrecisionChoice:
    dtype: torch.dtype
    reason: str  # for the log: the setting, or the probe's times
    float32_ms: float | None = None
    bfloat16_ms: float | None = None

    @property
    def name(self) -> str:
        return "bfloat16" if self.dtype == torch.bfloat16 else "float32"


def random_batch(cfg, layout, n_actions: int, device: torch.device, batch_size: int | None = None) -> dict:
    """A replay batch of the shapes and dtypes the buffers give (replay/mini_race.py), with random content."""
    b = int(batch_size or cfg.batch_size)
    g = torch.Generator().manual_seed(0)
    frames = (b, *frame_shape(cfg))
    mean, std = torch.as_tensor(layout.mean, dtype=torch.float32), torch.as_tensor(layout.std, dtype=torch.float32)
    batch = {
        "state_img": torch.randint(0, 256, frames, generator=g, dtype=torch.uint8),
        "next_state_img": torch.randint(0, 256, frames, generator=g, dtype=torch.uint8),
        "state_float": mean + std * torch.randn(b, layout.dim, generator=g),
        "next_state_float": mean + std * torch.randn(b, layout.dim, generator=g),
        "action": torch.randint(0, n_actions, (b,), generator=g),
        "reward": torch.randn(b, generator=g),
        "gamma_eff": torch.full((b,), 0.99),
    }
    return {k: v.to(device) for k, v in batch.items()}


def time_train_steps(cfg, layout, n_actions: int, device: torch.device, dtypes: tuple) -> dict:
    """Median ms of one train step per dtype, steps alternated between dtypes so that a slower moment of the
    machine counts against each alike. Uses its own networks and leaves torch's random state as it found it:
    the run's networks and seeded sampling are not touched."""
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(0)
        return _time_train_steps(cfg, layout, n_actions, device, dtypes)


def _time_train_steps(cfg, layout, n_actions: int, device: torch.device, dtypes: tuple) -> dict:
    online, target = make_network(cfg, layout, n_actions, device), make_network(cfg, layout, n_actions, device)
    trainer = Trainer(online, target, make_optimizer(online, cfg, 1e-6), cfg, device)
    batch = random_batch(cfg, layout, n_actions, device)
    times = {dtype: [] for dtype in dtypes}
    for round_index in range(PROBE_WARMUP_STEPS + PROBE_TIMED_ROUNDS):
        for dtype in dtypes:
            trainer.precision = dtype
            wait_for_device(device)
            start = time.perf_counter()
            trainer.train_on_tensors(batch, do_learn=True)
            wait_for_device(device)
            if round_index >= PROBE_WARMUP_STEPS:
                times[dtype].append(1000 * (time.perf_counter() - start))
    return {dtype: statistics.median(values) for dtype, values in times.items()}


def bfloat16_usable(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu"


def choose_precision(
    setting: str, cfg, layout, n_actions: int, device: torch.device, log: Callable[[str], None], threads: int | None = None
) -> PrecisionChoice:
    """The train step's dtype for `training_precision` = "float32", "bfloat16" or "auto" (probe), logged. `threads`:
    the torch threads the training thread will step on; the probe times the step on as many, in a thread of its own
    (None: on this thread, as it is set)."""
    if setting in PRECISIONS:
        choice = PrecisionChoice(PRECISIONS[setting], f"training_precision = {setting!r}")
    elif not bfloat16_usable(device):
        choice = PrecisionChoice(torch.float32, f"auto: {device.type} has no bfloat16 autocast")
    else:
        probe_threads = threads or torch.get_num_threads()
        medians = on_threads(threads, lambda: time_train_steps(cfg, layout, n_actions, device, (torch.float32, torch.bfloat16)))
        probe = f"probe of the train step at batch {cfg.batch_size} on {device.type} ({probe_threads} thread(s))"
        choice = choice_from_probe(medians[torch.float32], medians[torch.bfloat16], probe)
    log(f"training precision {choice.name}: {choice.reason}")
    return choice


def on_threads(threads: int | None, work: Callable[[], object]):
    """work() on a short-lived thread set to `threads` torch threads (None: on this thread, as it is). The learner's
    main thread keeps one torch thread (learner/cores.py keep_main_thread_single): a team of OpenMP workers of its own
    would stay alive and slow the training thread's; a thread that ends takes its team with it.

    A SIGINT or SIGTERM meanwhile is acted on once work() has ended: a handler that raised inside Python 3.11's
    join() would leave the thread running, marked finished (bpo-45274), and an interpreter that exits under a thread
    still inside torch aborts the process ("terminate called without an active exception")."""
    if threads is None:
        return work()
    outcome: dict = {}

    def run():
        try:
            torch.set_num_threads(threads)
            outcome["value"] = work()
        except BaseException as e:  # noqa: BLE001 - raised again in the caller's thread
            outcome["error"] = e

    thread = threading.Thread(target=run, name="on-threads")
    with DeferredSignals():
        thread.start()
        thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def choice_from_probe(float32_ms: float, bfloat16_ms: float, probe: str) -> PrecisionChoice:
    """The "auto" decision on the probe's median step times: bfloat16 when it is at least MIN_SPEEDUP times faster
    (float32_ms / bfloat16_ms >= MIN_SPEEDUP), else float32. `probe` says how they were measured, for the log."""
    faster = float32_ms / bfloat16_ms >= MIN_SPEEDUP
    verdict = "bfloat16 is faster" if faster else f"bfloat16 is not {MIN_SPEEDUP}x faster"
    return PrecisionChoice(
        torch.bfloat16 if faster else torch.float32,
        f"auto, {probe}: float32 {float32_ms:.1f} ms, bfloat16 {bfloat16_ms:.1f} ms ({float32_ms / bfloat16_ms:.2f}x): {verdict}",
        float32_ms,
        bfloat16_ms,
    )
