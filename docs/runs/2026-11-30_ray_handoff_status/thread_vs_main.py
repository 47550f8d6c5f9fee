"""Actions/s of one RacePlayer (default CarRacing config) played in the process's main thread vs a second thread,
in fresh processes, alternated. Usage: python thread_vs_main.py REPO WINDOW_S PAIRS"""

import json
import statistics
import subprocess
import sys

CHILD = r"""
import sys, time, threading, json, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import torch
from trackmania_rl.agents.acting import use_acting_torch_settings
from trackmania_rl.benchmarks.pipeline import default_config_copy, GAME_BACKEND
from trackmania_rl.rollouts.race import RacePlayer
mode, window = sys.argv[2], float(sys.argv[3])
use_acting_torch_settings()
_, live = default_config_copy(Path(tempfile.mkdtemp()))
class W:
    def fetch_into(self, copy, known): return known
out = {}
def play():
    use_acting_torch_settings()
    p = RacePlayer(live.current, GAME_BACKEND, W(), 0, 1, "diag", print)
    p.play(0)  # warm-up
    start, actions = time.perf_counter(), 0
    while time.perf_counter() - start < window:
        env = p.play(0)
        actions += len(env.rollout_results["actions"])
    out["rate"] = actions / (time.perf_counter() - start)
if mode == "main":
    play()
else:
    t = threading.Thread(target=play); t.start(); t.join()
print(json.dumps(out))
"""
repo, window, pairs = sys.argv[1], sys.argv[2], int(sys.argv[3])
rates = {"main": [], "thread": []}
for i in range(pairs):
    for mode in ("main", "thread") if i % 2 == 0 else ("thread", "main"):
        r = subprocess.run([sys.executable, "-c", CHILD, repo, mode, window], capture_output=True, text=True)
        line = [row for row in r.stdout.splitlines() if row.startswith("{")]
        if not line:
            print(r.stderr[-2000:])
            sys.exit(1)
        rates[mode].append(json.loads(line[-1])["rate"])
        print(mode, round(rates[mode][-1], 1), flush=True)
ratios = [t / m for t, m in zip(rates["thread"], rates["main"], strict=True)]
print(
    json.dumps(
        {
            "main": [round(x, 1) for x in rates["main"]],
            "thread": [round(x, 1) for x in rates["thread"]],
            "thread_over_main": [round(x, 3) for x in ratios],
            "median": round(statistics.median(ratios), 3),
        }
    )
)
