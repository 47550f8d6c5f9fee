"""HTTP source figures (DESIGN §5, issue 15). Needs the http extra.

- `http.client_actions_ratio`: actions/s of the reference external client (scripts/play_remote.py's
  RemoteClient: plays, sends each race over HTTP on loopback, pulls weights) ÷ a local collector process,
  same default config, same game, same machine; each measured over the same window after its first race
  (start-up and TorchScript compile excluded), the learner only draining; alternated local/http per round,
  medians. Target >= 0.90.
- `http.ingest_ms_per_rollout`: POST /v1/rollouts of the longest real race seen, end to end on loopback
  (client encode + send + server decode/check/queue + 202), median; with the body size and the server's part.

The load test (issue 15 point 7) is not a figure of `scripts/benchmark.py`: run it with
    python -m trackmania_rl.benchmarks.http --load [--clients 8] [--seconds 120]
It starts scripts/train.py --collectors 0 --listen on loopback (a small learner, a queue of 4 races, an
off-policy tolerance of 1) and `--clients` replay processes that send recorded races as fast as allowed,
honouring `paused` and backing off on 429; it prints the answers by status, the queue and memory seen.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np
import torch
import torch.multiprocessing as torch_mp

from trackmania_rl.agents.iqn import make_network
from trackmania_rl.benchmarks.pipeline import GAME_BACKEND, default_config_copy, local_actions_per_s, source_actions_per_s
from trackmania_rl.benchmarks.recorded_races import record_races
from trackmania_rl.config.live import LiveConfig
from trackmania_rl.config.loader import CONFIG_DIR, REPO_ROOT, frame_shape
from trackmania_rl.games import float_layout_for
from trackmania_rl.learner.sources import SourceContext
from trackmania_rl.rollouts.http import wire
from trackmania_rl.rollouts.http.client import Api, RemoteClient
from trackmania_rl.rollouts.http.source import make_http_source
from trackmania_rl.rollouts.local.shared_network import SharedNetwork

INGEST_POSTS = 30


# ------------------------------------------------------------------------------- actions ratio
def _client_process(url: str, token: str, stop) -> None:
    from trackmania_rl.agents.acting import use_acting_torch_settings

    use_acting_torch_settings()  # as a local collector: one thread, batch-1 settings
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    client = RemoteClient(url, token, "benchmark", log=lambda m: None)
    try:
        client.run(None, stop)
    except KeyboardInterrupt:
        client.close()


def _http_actions_per_s(ctx, source, window_s: float, keep: list) -> float:
    """Actions/s of one external client process over `window_s` after its warm-up races."""
    stop = ctx.Event()
    url = f"http://127.0.0.1:{source.server.port}"
    process = ctx.Process(target=_client_process, args=(url, source.token, stop), daemon=True)
    process.start()

    def keep_the_longest(envelope) -> None:
        if not keep or len(envelope[0]["actions"]) > len(keep[0][0]["actions"]):
            keep[:] = [envelope]

    try:
        return source_actions_per_s(source, 1, window_s, on_envelope=keep_the_longest)
    finally:
        stop.set()
        process.join(30)
        if process.is_alive():
            process.kill()
            process.join(10)
        while source.get(0.0) is not None:  # what it sent while stopping
            pass


def _context(workdir: Path, config_path: Path, live) -> SourceContext:
    options = types.SimpleNamespace(new_token=False)
    layout = float_layout_for(live.current)
    return SourceContext(options, live, config_path, GAME_BACKEND, layout, workdir, log=lambda m: None)


def _ingest_figures(source, envelope) -> dict:
    """POST the race `envelope` INGEST_POSTS times (fresh sequence numbers), timing each end to end."""
    fields = wire.race_fields(source.shape.frame_shape, source.shape.float_dim, source.shape.n_actions)
    api = Api(f"http://127.0.0.1:{source.server.port}", source.token)
    status, answer = api.json("POST", "/v1/register", {"name": "ingest", "game": "carracing", "protocol_version": 1})
    client_id = answer["client_id"]
    rollout_results, stats, meta = envelope
    rollout_results = {**rollout_results, "policy_version": [source._policy[0]] * len(rollout_results["actions"])}
    round_trip, encode, server_part = [], [], []
    body = b""
    for seq in range(INGEST_POSTS + 1):
        source.scalars()  # resets the server's per-window timings
        start = time.perf_counter()
        body = wire.encode_race(client_id, seq, rollout_results, stats, meta, fields)
        encoded = time.perf_counter()
        status, _, _ = api.request("POST", "/v1/rollouts", body, "application/msgpack")
        done = time.perf_counter()
        if status != 202:
            raise RuntimeError(f"ingest benchmark: POST answered {status}")
        server_ms = source.scalars()["http/ingest_ms_median"]
        source.get(1.0)
        if seq == 0:
            continue  # the first request opens the connection
        round_trip.append(1000 * (done - start))
        encode.append(1000 * (encoded - start))
        server_part.append(server_ms)
    api.close()
    return {
        "figure": "http.ingest_ms_per_rollout",
        "value": round(statistics.median(round_trip), 2),
        "unit": "ms",
        "encode_ms_median": round(statistics.median(encode), 2),
        "server_decode_check_queue_ms_median": round(statistics.median(server_part), 2),
        "body_bytes": len(body),
        "race_actions": len(rollout_results["actions"]),
        "posts": len(round_trip),
    }


def run(args):
    torch.set_num_threads(1)
    window_s = 20.0 if args.quick else 60.0
    rounds = 1 if args.quick else 2
    workdir = Path(tempfile.mkdtemp(prefix="http_benchmark_"))
    try:
        config_path, live = default_config_copy(workdir)
        cfg = live.current
        layout = float_layout_for(cfg)
        network = make_network(cfg, layout, len(cfg.inputs))
        ctx = torch_mp.get_context("spawn")
        shared = SharedNetwork(make_network(cfg, layout, len(cfg.inputs)), ctx)
        shared.publish(1, network.state_dict())
        source = make_http_source(_context(workdir, config_path, live), "127.0.0.1:0")
        source.publish(1, network.state_dict())
        source.start()
        local, remote, longest = [], [], []
        try:
            for _ in range(rounds):  # alternated, so a slow spell of the machine hits both
                local.append(local_actions_per_s(ctx, config_path, shared, 1, window_s))
                remote.append(_http_actions_per_s(ctx, source, window_s, longest))
            ingest = _ingest_figures(source, longest[0])
        finally:
            source.stop()
        yield {
            "figure": "http.client_actions_ratio",
            "value": round(statistics.median(remote) / statistics.median(local), 3),
            "unit": "ratio",
            "target": ">= 0.90",
            "http_actions_per_s": [round(v, 1) for v in remote],
            "local_actions_per_s": [round(v, 1) for v in local],
            "window_s": window_s,
        }
        yield ingest
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# ---------------------------------------------------------------------------------------- load test
LOAD_SETTINGS = """
# --- load test: a small learner, a short queue and a low off-policy tolerance ---
memory_size_schedule = [(0, (3_000, 300))]
batch_size = 32
cutoff_rollout_if_race_not_finished_within_duration_ms = 8_000
conv_layers = [(8, 4, 2), (8, 4, 2)]
dense_hidden_dimension = 32
float_hidden_dim = 32
iqn_embedding_dimension = 16
send_shared_network_every_n_batches = 2
save_frequency_s = 10_000
http_queue_size = 4
http_off_policy_tolerance = 1
"""


def _record_races(config_path: Path, count: int) -> list[tuple]:
    """`count` real races played by this project's RacePlayer (fresh weights), to be replayed."""
    from trackmania_rl.config.loader import load_config

    return record_races(load_config(config_path, game_backend=GAME_BACKEND), GAME_BACKEND, count)[0]


def _replayer(index: int, url: str, token: str, races_path: str, seconds: float, start_barrier, results) -> None:
    """One load client: sends recorded races for `seconds`, as fast as the server allows; honours `paused`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    bodies = wire.unpack(Path(races_path).read_bytes(), max_bin_len=1 << 30)
    api = Api(url, token)
    counts = {"202": 0, "429": 0, "other": 0, "network_errors": 0, "paused_answers": 0, "paused_waits": 0, "paused_s": 0.0}
    client_id, seq, version = None, 0, 0
    rng = random.Random(index)
    start_barrier.wait(300)  # all clients ready (imports done): the load starts at once
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if client_id is None:
                status, answer = api.json("POST", "/v1/register", {"name": f"load{index}", "game": "carracing", "protocol_version": 1})
                client_id, seq, version = answer["client_id"], 0, answer["policy_version"]
            race = dict(rng.choice(bodies))
            race["race"] = dict(race["race"])
            n_actions = race["race"]["actions"]["shape"][0]
            race["race"]["policy_version"] = wire.encode_array(np.full(n_actions, version, np.int64))
            body = wire.pack({**race, "client_id": client_id, "seq": seq})
            status, _, data = api.request("POST", "/v1/rollouts", body, "application/msgpack")
        except (OSError, ConnectionError):
            counts["network_errors"] += 1
            time.sleep(0.5)
            continue
        if status == 202:
            counts["202"] += 1
            seq += 1
            answer = json.loads(data)
            version = answer["policy_version"]
            if answer["paused"]:
                counts["paused_answers"] += 1
                counts["paused_waits"] += 1
                start = time.monotonic()
                while time.monotonic() < deadline:  # honour it: no new race until the server says so
                    time.sleep(0.1)
                    status, st = api.json("GET", "/v1/status")
                    if status == 200 and not st["paused"]:
                        version = st["policy_version"]
                        break
                counts["paused_s"] += time.monotonic() - start
        elif status == 429:
            counts["429"] += 1
            time.sleep(0.2 + 0.3 * rng.random())
        elif status == 404:
            client_id = None
        else:
            counts["other"] += 1
            counts.setdefault("other_detail", data[:200].decode(errors="replace"))
    if client_id is not None:
        api.json("POST", "/v1/disconnect", {"client_id": client_id})
    results[index] = counts


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def load_test(workdir: Path, clients: int = 8, seconds: float = 120.0, log=print) -> dict:
    """The load test of issue 15 point 7 in `workdir`; returns its figures (see the module docstring)."""
    workdir = Path(workdir)
    config_path = workdir / "config.py"
    config_path.write_text((CONFIG_DIR / "config.py").read_text() + LOAD_SETTINGS)
    races = _record_races(config_path, 3)
    cfg_live = LiveConfig(config_path, game_backend=GAME_BACKEND, log=lambda m: None)
    layout = float_layout_for(cfg_live.current)
    fields = wire.race_fields(frame_shape(cfg_live.current), layout.dim, len(cfg_live.current.inputs))
    bodies = [wire.unpack(wire.encode_race("x", 0, r, s, m, fields), max_bin_len=1 << 30) for r, s, m in races]
    races_path = workdir / "races.msgpack"
    races_path.write_bytes(wire.pack(bodies))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [
        sys.executable, str(REPO_ROOT / "scripts" / "train.py"), "--config", str(config_path), "--save-dir", str(workdir / "save"),
        "--tensorboard-dir", str(workdir / "tb"), "--run-name", "load", "--collectors", "0", "--listen", f"127.0.0.1:{port}",
        "--no-status-line",
    ]  # fmt: skip
    train_log = open(workdir / "train.log", "w")
    trainer = subprocess.Popen(command, stdout=train_log, stderr=subprocess.STDOUT, cwd=workdir)
    token_path = workdir / "save" / "load" / "http_token"
    figures: dict = {}
    try:
        deadline = time.monotonic() + 120
        while "HTTP endpoint" not in (workdir / "train.log").read_text():
            if time.monotonic() > deadline or trainer.poll() is not None:
                raise RuntimeError("the learner did not start: " + (workdir / "train.log").read_text()[-2000:])
            time.sleep(0.3)
        token = token_path.read_text().strip()
        url = f"http://127.0.0.1:{port}"
        ctx = multiprocessing.get_context("spawn")
        results = ctx.Manager().dict()
        barrier = ctx.Barrier(clients + 1)
        args = (url, token, str(races_path), seconds, barrier, results)
        processes = [ctx.Process(target=_replayer, args=(i, *args)) for i in range(clients)]
        for p in processes:
            p.start()
        barrier.wait(300)
        samples = []  # (t, queue_size, paused, rss_mb)
        api = Api(url, token)
        start = time.monotonic()
        while any(p.is_alive() for p in processes):
            try:
                status, st = api.json("GET", "/v1/status")
                if status == 200:
                    samples.append((time.monotonic() - start, st["queue_size"], st["paused"], _rss_mb(trainer.pid)))
            except (OSError, ConnectionError):
                samples.append((time.monotonic() - start, None, None, _rss_mb(trainer.pid)))
            time.sleep(0.5)
        for p in processes:
            p.join(30)
        status, final = api.json("GET", "/v1/status")
        api.close()
        per_client = dict(results)
        total = {
            k: sum(c.get(k, 0) for c in per_client.values())
            for k in ("202", "429", "other", "network_errors", "paused_answers", "paused_waits")
        }
        warm = [s for s in samples if s[0] >= 0.25 * seconds]
        rss = [s[3] for s in samples]
        figures = {
            "clients": clients,
            "seconds": seconds,
            "answers": total,
            "client_exit_codes": [p.exitcode for p in processes],
            "paused_s_per_client_median": round(statistics.median(c["paused_s"] for c in per_client.values()), 1),
            "queue_capacity": final["queue_capacity"],
            "queue_size_max_seen": max(s[1] for s in samples if s[1] is not None),
            "status_failures": sum(1 for s in samples if s[1] is None),
            "paused_fraction_of_samples": round(sum(1 for s in samples if s[2]) / max(1, len(samples)), 3),
            "rss_mb_first_quarter_max": round(max(s[3] for s in samples if s[0] < 0.25 * seconds), 1),
            "rss_mb_max": round(max(rss), 1),
            "rss_mb_growth_after_first_quarter": round(max(s[3] for s in warm) - warm[0][3], 1) if warm else None,
            "races_received": final["races_received"],
            "races_received_while_paused": final["races_received_while_paused"],
            "races_dropped": final["races_dropped"],
            "learner_step": final["learner_step"],
            "other_details": [c["other_detail"] for c in per_client.values() if "other_detail" in c],
        }
        log(json.dumps(figures))
    finally:
        if trainer.poll() is None:
            trainer.send_signal(signal.SIGTERM)
            try:
                figures["learner_exit_code"] = trainer.wait(120)
            except subprocess.TimeoutExpired:
                trainer.kill()
                figures["learner_exit_code"] = trainer.wait(10)
        train_log.close()
    return figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="the HTTP load test (issue 15 point 7)")
    parser.add_argument("--load", action="store_true", required=True)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=120.0)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="http_load_"))
    try:
        figures = load_test(workdir, args.clients, args.seconds, log=lambda m: None)
        print(json.dumps({"figure": "http.load", **figures}), flush=True)
        return 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
