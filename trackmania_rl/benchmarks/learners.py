"""Data-parallel learners (issues 29, 49): how much more two ranks learn than one, and where a rank's step time goes.

Real CarRacing races are recorded first (benchmarks/recorded_races.py) and replayed into real learners
(benchmarks/absorb.py's ReplaySource): each learner is a spawned process with one torch thread, the default config
in one precision (float32, then bfloat16: `--precision` picks one) and a replay ratio so high that its training
thread never runs out of credit, its buffers filled once before timing. Per precision, these processes live through
the benchmark: one learner alone (learner/learner.py with its TrainingThread: what `--learners 1` runs), a second
one for `independent`, and a group of two ranks per gradient exchange (learner_group/: RankLearner,
GroupTrainingThread, gloo on loopback; `overlap` and `after_backward`, learner_group/gradients.py). Their training
threads stay paused except during their windows, which alternate (alone, each group, both alone, ...) so that all
see the same machine.
- `learners.scaling_2` (per precision and exchange): learned transitions/s (learning batches x batch size, summed over
  the ranks) of the two ranks ÷ those of the learner alone, same per-rank batch; median of the windows' pairs.
  Target >= 1.8 (each added learner at least 0.8 of one).
- `learners.scaling_4` (machines of 4 cores or more, the config's exchange): the same with four ranks (target >= 3.4).
- `learners.independent_2`: the machine's own ceiling for two: two learners alone, unrelated, training at the same
  time (their transitions/s summed) ÷ one learner alone, in the same alternation. What scaling_2 loses below it is the
  group's (exchanges, agreements, waiting for the slower rank); what it loses below 2 is the machine's (shared caches
  and memory bandwidth, clock).
- `learners.step_ms` (per precision and configuration): where a learning step's time goes, ms per step, summed over
  the windows: sampling the batch, forward, backward, exchange (the wait for the averaged gradients after backward),
  optimizer, hidden-test batches, agreement rounds, and the rest of the training thread's loop (`other`).
- `learners.allreduce_ms`: one gradient exchange of the default network after backward (one all_reduce of every
  gradient, flattened, between the two ranks, both ready: the transfer alone), median of 100 after the windows.
- `learners.agreement_ms`: one agreement round before a chunk of steps (an all_gather of 8 integers), median of 100.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from trackmania_rl.agents.step_phases import PHASES
from trackmania_rl.benchmarks.absorb import RECORDING_FRAMES_PLAYED, ReplaySource, _fill_once
from trackmania_rl.benchmarks.pipeline import GAME_BACKEND, default_config_copy
from trackmania_rl.benchmarks.recorded_races import SHIPPED_WEIGHTS, record_races
from trackmania_rl.config.live import LiveConfig
from trackmania_rl.games import float_layout_for
from trackmania_rl.learner.learner import Learner
from trackmania_rl.learner.training_thread import TrainingThread
from trackmania_rl.learner_group.agreement import FIELDS, Agreement
from trackmania_rl.learner_group.gradients import EXCHANGES, AfterBackwardExchange, make_gradient_exchange
from trackmania_rl.learner_group.rank_learner import RankLearner
from trackmania_rl.learner_group.rendezvous import GroupConnection, StoreServer, connect_store
from trackmania_rl.learner_group.training_thread import GroupTrainingThread, take_rank0_state

HOST = "127.0.0.1"
TIMEOUT_S = 300.0
UNLIMITED_REPLAY_RATIO = 1_000_000
EXCHANGES_TIMED = 100
PRECISIONS = ("float32", "bfloat16")


def _quiet(message: str) -> None:
    return None


def _ratio_figure(figure: str, rates: dict, kind: str, target: str | None = None) -> dict:
    """A scaling figure: `kind`'s learned transitions/s over the lone learner's, per round (`pair_ratios`) and their
    median (`value`)."""
    ratios = [r / one for one, r in zip(rates["alone"], rates[kind], strict=True)]
    figure = {"figure": figure, "value": round(statistics.median(ratios), 3), "unit": "ratio"}
    if target is not None:
        figure["target"] = target
    return {**figure, "pair_ratios": [round(r, 3) for r in ratios]}


def start_learner(rank: int, ranks: int, port: int, live, layout, device, folder: Path, source) -> tuple:
    """(learner, training thread not started, group connection or None) of one process: a lone learner when `ranks` is
    1, else rank `rank` of a group joined through the store on HOST:port, starting from rank 0's weights as in a run,
    its gradients exchanged as the config says."""
    connection = None
    if ranks == 1:
        learner = Learner(live, layout, device, folder, source=source, log=_quiet, resume=False)
        thread = TrainingThread(learner, wanted_threads=lambda: 1)
    else:
        store = connect_store(HOST, port, ranks, TIMEOUT_S)
        connection = GroupConnection.join(store, rank, ranks, HOST, TIMEOUT_S, device)
        learner = RankLearner(live, layout, device, folder, rank=rank, ranks=ranks, source=source, log=_quiet, resume=False)
        kind = learner.cfg.learners_gradient_exchange
        learner.trainer.gradient_exchange = make_gradient_exchange(kind, connection.gradients, ranks, learner.online.parameters())
        take_rank0_state(learner, connection)  # every rank starts from rank 0's weights, as in a run
        thread = GroupTrainingThread(learner, connection, wanted_threads=lambda: 1, log=_quiet)
    return learner, thread, connection


def _seconds_by_phase(learner, thread) -> dict:
    """The training thread's time so far by phase (agents/step_phases.py), its agreement rounds included."""
    seconds = learner.trainer.phases.snapshot()
    agreement = getattr(thread, "agreement", None)
    seconds["agreement"] = agreement.seconds if agreement is not None else 0.0
    return seconds


def learner_process(rank: int, ranks: int, port: int, config_path: str, races: list, workdir: str, commands, replies) -> None:
    """One learner of the benchmark (alone when `ranks` is 1), driven by `commands`: ("run", seconds) trains that long
    and replies (learning batches, seconds, seconds by phase in that window); ("exchanges", n) stops training and times
    n gradient exchanges after backward and n agreement rounds (ms); ("exit", None) ends."""
    torch.set_num_threads(1)
    live = LiveConfig(Path(config_path), game_backend=GAME_BACKEND, log=_quiet)
    layout = float_layout_for(live.current)
    source = ReplaySource(races)
    device = torch.device("cpu")
    folder = Path(workdir) / f"learner_{Path(config_path).stem}_{ranks}_{rank}_{os.getpid()}"
    learner, thread, connection = start_learner(rank, ranks, port, live, layout, device, folder, source)
    _fill_once(learner, source)
    thread.start()
    pause = thread.paused()
    pause.__enter__()
    replies.put(("ready", learner.precision.name, learner.cfg.batch_size, len(learner.buffer)))
    while True:
        command, value = commands.get()
        if command == "run":
            before = _seconds_by_phase(learner, thread)
            pause.__exit__(None, None, None)
            start, batches = time.perf_counter(), learner.stats.batches_done
            time.sleep(value)
            pause = thread.paused()
            pause.__enter__()
            seconds = time.perf_counter() - start
            phases = {key: value - before[key] for key, value in _seconds_by_phase(learner, thread).items()}
            replies.put(("ran", learner.stats.batches_done - batches, seconds, phases))
        elif command == "exchanges":
            thread.stop()  # the group's last round: the pg is the main thread's from here on
            pause.__exit__(None, None, None)
            thread.check()
            exchange = AfterBackwardExchange(connection.gradients, ranks, learner.online.parameters())
            agreement = Agreement(connection.training, rank, ranks, 4)
            for parameter in learner.online.parameters():
                parameter.grad = torch.ones_like(parameter)
            row = dict.fromkeys(FIELDS, 0)
            exchange_ms, agreement_ms = [], []
            for _ in range(value):
                start = time.perf_counter()
                exchange.finish()
                exchange_ms.append(1000 * (time.perf_counter() - start))
                start = time.perf_counter()
                agreement.round({**row, "batches_done": learner.stats.batches_done})
                agreement_ms.append(1000 * (time.perf_counter() - start))
            replies.put(("exchanges", statistics.median(exchange_ms[10:]), statistics.median(agreement_ms[10:]), exchange.flat.numel()))
        elif command == "exit":
            thread.stop()
            learner.batches.close()
            return


class _Learners:
    """The processes of one configuration (1 or 2 ranks)."""

    def __init__(self, ranks: int, config_path: Path, races: list, workdir: Path):
        context = multiprocessing.get_context("spawn")
        self.server = StoreServer(HOST, ranks, TIMEOUT_S) if ranks > 1 else None
        port = self.server.port if self.server is not None else 0
        self.channels = [(context.Queue(), context.Queue()) for _ in range(ranks)]
        self.processes = [
            context.Process(target=learner_process, args=(k, ranks, port, str(config_path), races, str(workdir), *self.channels[k]))
            for k in range(ranks)
        ]
        for process in self.processes:
            process.start()
        self.ready = [replies.get(timeout=TIMEOUT_S) for _, replies in self.channels]

    def ask(self, command: str, value) -> list:
        self.send(command, value)
        return self.replies()

    def send(self, command: str, value) -> None:
        for commands, _ in self.channels:
            commands.put((command, value))

    def replies(self) -> list:
        return [replies.get(timeout=TIMEOUT_S) for _, replies in self.channels]

    def close(self) -> None:
        for (commands, _), process in zip(self.channels, self.processes, strict=True):
            if process.is_alive():
                commands.put(("exit", None))
        for process in self.processes:
            process.join(60)
            if process.is_alive():
                process.kill()
        if self.server is not None:
            self.server.close()


def _config_for(workdir: Path, base_text: str, precision: str, exchange: str) -> Path:
    """The default config in `precision` with `exchange`, its replay ratio never short of credit."""
    path = workdir / f"config_{precision}_{exchange}.py"
    path.write_text(
        base_text
        + f"\nnumber_times_single_memory_is_used_before_discard = {UNLIMITED_REPLAY_RATIO}\n"
        + f'training_precision = "{precision}"\nlearners_gradient_exchange = "{exchange}"\n'
    )
    return path


def _step_ms(windows: list) -> dict:
    """Rank 0's ms per learning step by phase over its windows (`learners.step_ms`); `other`: the rest of the window."""
    batches = sum(reply[1] for reply in windows)
    seconds = sum(reply[2] for reply in windows)
    phases = {key: sum(reply[3][key] for reply in windows) for key in (*PHASES, "agreement")}
    ms = {key: round(1000 * value / max(1, batches), 3) for key, value in phases.items()}
    ms["other"] = round(1000 * (seconds - sum(phases.values())) / max(1, batches), 3)
    ms["total"] = round(1000 * seconds / max(1, batches), 3)
    return ms


def _measure_precision(
    precision: str, base_text: str, default_exchange: str, races: list, workdir: Path, rounds: int, window_s: float, groups: list
):
    """The figures of one precision (module docstring); `default_exchange`: the config's, for the lone learners and quad."""
    paths = {exchange: _config_for(workdir, base_text, precision, exchange) for exchange in EXCHANGES}
    alone = _Learners(1, paths[default_exchange], races, workdir)
    other = _Learners(1, paths[default_exchange], races, workdir)  # with `alone`: two unrelated learners at once
    groups += [alone, other]
    kinds = {"alone": alone}
    for exchange in EXCHANGES:
        kinds[f"pair_{exchange}"] = _Learners(2, paths[exchange], races, workdir)
        groups.append(kinds[f"pair_{exchange}"])
    if (os.cpu_count() or 1) >= 4:
        kinds["quad"] = _Learners(4, paths[default_exchange], races, workdir)
        groups.append(kinds["quad"])
    batch_size = alone.ready[0][2]
    measured = alone.ready[0][1]
    rates: dict[str, list[float]] = {kind: [] for kind in [*kinds, "independent"]}
    windows: dict[str, list] = {kind: [] for kind in kinds}
    load = [os.getloadavg()[0]]
    for k in range(rounds):
        order = [*kinds, "independent"]
        for kind in order if k % 2 == 0 else order[::-1]:
            if kind == "independent":
                alone.send("run", window_s)
                other.send("run", window_s)
                rates[kind].append(sum(r[1] * batch_size / r[2] for r in alone.replies() + other.replies()))
            else:
                learners = kinds[kind]
                rank0 = learners.ask("run", window_s)[0]  # rank 0's count: the ranks step together
                windows[kind].append(rank0)
                rates[kind].append(len(learners.processes) * rank0[1] * batch_size / rank0[2])
        load.append(os.getloadavg()[0])
    common = {"precision": measured, "batch_size": batch_size, "threads_per_rank": 1, "window_s": window_s, "cores": os.cpu_count()}
    for exchange in EXCHANGES:
        yield {
            **_ratio_figure("learners.scaling_2", rates, f"pair_{exchange}", ">= 1.8"),
            "exchange": exchange,
            "learned_transitions_per_s_1": [round(r) for r in rates["alone"]],
            "learned_transitions_per_s_2": [round(r) for r in rates[f"pair_{exchange}"]],
            **common,
            "load_average_1min": [round(x, 2) for x in load],
        }
    if "quad" in rates:
        yield {
            **_ratio_figure("learners.scaling_4", rates, "quad", ">= 3.4"),
            "exchange": default_exchange,
            "learned_transitions_per_s_4": [round(r) for r in rates["quad"]],
            **common,
        }
    yield {
        **_ratio_figure("learners.independent_2", rates, "independent"),
        "learned_transitions_per_s_two_alone": [round(r) for r in rates["independent"]],
        **common,
    }
    for kind in kinds:
        step_ms = _step_ms(windows[kind])
        yield {"figure": "learners.step_ms", "configuration": kind, "value": step_ms, "unit": "ms per learning step", **common}
    replies = kinds["pair_after_backward"].ask("exchanges", EXCHANGES_TIMED)
    _, exchange_ms, agreement_ms, floats = replies[0]
    yield {
        "figure": "learners.allreduce_ms",
        "value": round(exchange_ms, 3),
        "unit": "ms",
        "gradient_floats": floats,
        "gradient_mb": round(4 * floats / 2**20, 2),
        "ranks": 2,
        "backend": "gloo (loopback)",
        "exchanges": EXCHANGES_TIMED,
        "precision": measured,
    }
    yield {"figure": "learners.agreement_ms", "value": round(agreement_ms, 3), "unit": "ms", "ranks": 2, "precision": measured}


def run(args):
    if getattr(args, "device", "cpu") != "cpu":
        raise SystemExit("benchmark.py learners measures CPU ranks (gloo); it has no --device")
    quick = args.quick
    rounds, window_s = (2, 6.0) if quick else (4, 10.0)
    precisions = PRECISIONS if getattr(args, "precision", "both") == "both" else (args.precision,)
    workdir = Path(tempfile.mkdtemp(prefix="learners_benchmark_"))
    groups: list[_Learners] = []
    try:
        config_path, live = default_config_copy(workdir)
        races, _ = record_races(live.current, GAME_BACKEND, 3 if quick else 6, SHIPPED_WEIGHTS, RECORDING_FRAMES_PLAYED)
        base_text = config_path.read_text()
        for precision in precisions:
            default_exchange = live.current.learners_gradient_exchange
            yield from _measure_precision(precision, base_text, default_exchange, races, workdir, rounds, window_s, groups)
            for learners in groups:
                learners.close()
            groups.clear()
    finally:
        for learners in groups:
            learners.close()
        shutil.rmtree(workdir, ignore_errors=True)
