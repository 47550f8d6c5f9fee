"""One RacePlayer (default CarRacing) played for WINDOW_S in: a plain process's second thread, a bare Ray actor's
thread (num_cpus=1, nothing else in the actor), alternated PAIRS times. Also the actor process's nice, affinity,
allocator and env. Usage: python bare_actor.py REPO WINDOW_S PAIRS"""

import json
import statistics
import subprocess
import sys
import time

repo, window, pairs = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
sys.path.insert(0, repo)
import ray  # noqa: E402

from trackmania_rl.rollouts.ray import cluster  # noqa: E402

PLAY = r"""
import sys, time, threading, json, tempfile, os
from pathlib import Path
def play_for(repo, window, mode="thread"):
    sys.path.insert(0, repo)
    from trackmania_rl.agents.acting import use_acting_torch_settings
    from trackmania_rl.benchmarks.pipeline import default_config_copy, GAME_BACKEND
    from trackmania_rl.rollouts.race import RacePlayer
    use_acting_torch_settings()
    _, live = default_config_copy(Path(tempfile.mkdtemp()))
    class W:
        def fetch_into(self, copy, known): return known
    out = {}
    def play():
        use_acting_torch_settings()
        p = RacePlayer(live.current, GAME_BACKEND, W(), 0, 1, "diag", print)
        p.play(0)
        start, actions = time.perf_counter(), 0
        stages = {}
        while time.perf_counter() - start < window:
            env = p.play(0)
            actions += len(env.rollout_results["actions"])
            for k, v in env.end_race_stats.items():
                if k.startswith("instrumentation__"):
                    stages.setdefault(k[17:], []).append(v)
        out["rate"] = actions / (time.perf_counter() - start)
        out["stages_us"] = {k: round(sorted(v)[len(v)//2] / 1e3, 1) for k, v in stages.items()}
    if mode == "main":
        play()
    else:
        t = threading.Thread(target=play); t.start(); t.join()
    maps = open("/proc/self/maps").read()
    out["jemalloc"] = "jemalloc" in maps
    out["nice"] = os.getpriority(os.PRIO_PROCESS, 0)
    out["affinity"] = sorted(os.sched_getaffinity(0))
    out["threads"] = len(os.listdir("/proc/self/task"))
    out["env"] = {k: v for k, v in os.environ.items() if any(w in k for w in ("OMP", "MKL", "MALLOC", "LD_PRELOAD", "THREADS"))}
    return out
"""
exec(PLAY)

head = cluster.LocalNode.head(num_cpus=2, object_store_bytes=256 * 2**20)
cluster.use_token_file(head.token_path)
cluster.connect(head.address)
try:

    @ray.remote(num_cpus=1)
    class Bare:
        def run(self, repo, window, code):
            ns = {}
            exec(code, ns)
            return ns["play_for"](repo, window)

    child = PLAY + "\nimport json,sys\nprint(json.dumps(play_for(sys.argv[1], float(sys.argv[2]))))"
    rates = {"process": [], "ray": []}
    info = {}
    for i in range(pairs):
        for kind in ("process", "ray") if i % 2 == 0 else ("ray", "process"):
            if kind == "process":
                r = subprocess.run([sys.executable, "-c", child, repo, str(window)], capture_output=True, text=True)
                out = json.loads([line for line in r.stdout.splitlines() if line.startswith("{")][-1])
            else:
                a = Bare.remote()
                out = ray.get(a.run.remote(repo, window, PLAY))
                ray.kill(a)
                time.sleep(1)
            rates[kind].append(out["rate"])
            info[kind] = out
            print(kind, round(out["rate"], 1), out["stages_us"], flush=True)
    ratios = [r / p for r, p in zip(rates["ray"], rates["process"], strict=True)]
    print(
        json.dumps(
            {
                "rates": rates,
                "ray_over_process": [round(x, 3) for x in ratios],
                "median": round(statistics.median(ratios), 3),
                "info": {k: {kk: vv for kk, vv in v.items() if kk not in ("stages_us",)} for k, v in info.items()},
            },
            default=str,
        )
    )
finally:
    ray.shutdown()
    head.stop()
