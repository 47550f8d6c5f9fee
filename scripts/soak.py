"""Soak test: run real training for a long time and watch for errors, memory growth and restarts.

    python scripts/soak.py --minutes 60 --collectors 2 --out soak.json

Starts `scripts/train.py` on a fresh run (in a temporary folder unless --work-dir is given), samples the
resident memory (RSS) of the learner and of every collector every --sample-s seconds, and at the end prints
one JSON object: the exit code, error and traceback lines in the log, collector restarts, the RSS of the
learner and collectors at start, at their peak and at the end, their growth per hour after the replay
buffer last became full (the memory schedule may grow it during the run: memory should be flat only after
its last growth; what a leak would show), and every sample.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return None


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def growth_per_hour(samples: list[tuple[float, int]]) -> float | None:
    """Least-squares slope of RSS over time, in MB per hour."""
    if len(samples) < 3:
        return None
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_r = sum(r for _, r in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    if var == 0:
        return None
    slope = sum((t - mean_t) * (r - mean_r) for t, r in samples) / var  # bytes per second
    return slope * 3600 / 1e6


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--collectors", type=int, default=2)
    parser.add_argument("--sample-s", type=float, default=30.0)
    parser.add_argument("--work-dir", default=None, help="where the run's save/ and tensorboard/ go (default: a temporary folder)")
    parser.add_argument("--out", default=None, help="also write the JSON summary to this file")
    args = parser.parse_args(argv)
    if not (0 < args.minutes < 24 * 60) or not (1 <= args.collectors <= 4 * (os.cpu_count() or 1)) or not (1 <= args.sample_s <= 600):
        parser.error("--minutes in (0, 1440), --collectors in [1, 4 x cores], --sample-s in [1, 600]")
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="soak-"))
    work.mkdir(parents=True, exist_ok=True)
    log_path = work / "train.log"
    command = [
        sys.executable,
        str(REPO_ROOT / "scripts" / "train.py"),
        "--run-name", "soak",
        "--save-dir", str(work / "save"),
        "--tensorboard-dir", str(work / "tensorboard"),
        "--max-minutes", str(args.minutes),
        "--collectors", str(args.collectors),
        "--no-status-line",
    ]  # fmt: skip
    start = time.time()
    with open(log_path, "w") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
        learner_rss, collector_rss, buffer_full_at, times_full = [], [], None, 0
        try:
            while process.poll() is None:
                now = time.time() - start
                learner = rss_bytes(process.pid)
                if learner is not None:
                    learner_rss.append((now, learner))
                collector = [r for r in (rss_bytes(c) for c in children(process.pid)) if r is not None]
                if collector:
                    collector_rss.append((now, sum(collector)))
                full = log_path.read_text(errors="replace").count("replay buffer is full")
                if full > times_full:  # the buffer (re)filled at a new capacity: memory is flat from here on
                    times_full, buffer_full_at = full, now
                time.sleep(args.sample_s)
        except KeyboardInterrupt:
            process.send_signal(signal.SIGINT)
        exit_code = process.wait()
    text = log_path.read_text(errors="replace")
    after_full = buffer_full_at if buffer_full_at is not None else (time.time() - start) / 2

    def summary(samples):
        if not samples:
            return None
        late = [s for s in samples if s[0] >= after_full]
        return {
            "start_mb": round(samples[0][1] / 1e6, 1),
            "max_mb": round(max(r for _, r in samples) / 1e6, 1),
            "end_mb": round(samples[-1][1] / 1e6, 1),
            "growth_mb_per_hour_after_buffer_full": growth_per_hour(late),
        }

    result = {
        "minutes": args.minutes,
        "collectors": args.collectors,
        "exit_code": exit_code,
        "error_lines": len(re.findall(r"(?im)^.*\berror\b", text)),
        "traceback_lines": text.count("Traceback (most recent call last)"),
        "collector_restarts": len(re.findall(r"restarting it", text)),
        "buffer_last_full_after_s": buffer_full_at,
        "buffer_filled_times": times_full,
        "learner_rss": summary(learner_rss),
        "collectors_rss": summary(collector_rss),
        "log": str(log_path),
        "samples": {"learner": learner_rss, "collectors": collector_rss},
    }
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=1))  # samples: in --out
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0 if exit_code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
