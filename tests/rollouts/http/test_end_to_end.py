"""End to end (issue 15 points 2, 4, 5): scripts/train.py --collectors 0 --listen fed only by one
scripts/play_remote.py process, both real processes on 127.0.0.1. Races are accepted, train steps done and
weights pulled by version; SIGTERM makes the learner save and exit 0; the client keeps running across a
learner restart (it backs off, then registers again) and the resumed run keeps its token."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("fastapi")

from tests.faults.helpers import REPO_ROOT, Trainer, train_command  # noqa: E402
from tests.helpers import write_tiny_config  # noqa: E402
from tests.rollouts.http.support import Http  # noqa: E402

pytestmark = [pytest.mark.http, pytest.mark.slow]

PLAY_REMOTE = REPO_ROOT / "scripts" / "play_remote.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_status(port: int, token: str, ready, timeout_s: float) -> dict:
    deadline = time.time() + timeout_s
    last = None
    while time.time() < deadline:
        try:
            http = Http(port, token)
            status, answer = http.json("GET", "/v1/status")
            http.close()
            if status == 200:
                last = answer
                if ready(answer):
                    return answer
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"status never got ready within {timeout_s} s; last: {last}")


def test_training_fed_by_one_external_client(tmp_path):
    write_tiny_config(tmp_path)
    port = free_port()
    command = train_command(tmp_path, "remote", "--collectors", "0", "--listen", f"127.0.0.1:{port}")
    token_path = tmp_path / "save" / "remote" / "http_token"
    first = Trainer(command, tmp_path)
    client = None
    try:
        first.wait_for(r"HTTP endpoint for game clients", 120)
        assert "(created;" in first.log() and str(token_path) in first.log()
        token = token_path.read_text().strip()
        counts_file = tmp_path / "client_counts.json"
        client = subprocess.Popen(
            [sys.executable, str(PLAY_REMOTE), "--server", f"http://127.0.0.1:{port}", "--token-file", str(token_path),
             "--counts-file", str(counts_file)],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        status = wait_status(port, token, lambda s: s["races_received"] >= 6 and s["learner_step"] > 0 and s["policy_version"] >= 3, 240)
        assert status["races_dropped"]["invalid"] == 0 and status["races_dropped"]["bad_request"] == 0
        first.signal(signal.SIGTERM)
        assert first.finish(60) == 0
        log = first.log()
        assert "Traceback" not in log, log[-3000:]
        assert "HTTP client c-" in log and "registered" in log
        received = int(log.split("HTTP source: ")[1].split(" race(s) received")[0])
        assert received >= 6
        assert "checkpoint saved to" in log and " 0 batches" not in log.split("checkpoint saved to")[-1]

        # the learner restarts (a resume): same token, and the client, which kept running, registers again
        second = Trainer(command, tmp_path)
        try:
            second.wait_for(r"HTTP endpoint for game clients", 120)
            assert "kept from earlier sessions" in second.log() and token_path.read_text().strip() == token
            wait_status(port, token, lambda s: s["races_received"] >= 2, 180)
            client.send_signal(signal.SIGTERM)
            client_log = client.communicate(timeout=60)[0]
            assert client.returncode == 0, client_log[-3000:]
            second.signal(signal.SIGTERM)
            assert second.finish(60) == 0
        finally:
            second.kill()
        counts = json.loads(counts_file.read_text())["0"]
        assert counts["registrations"] >= 2, client_log[-3000:]  # it registered again after the restart
        assert counts["weight_pulls"] >= 2 and counts["sent"] >= 8 and counts["dropped"] <= 1
        assert "Traceback" not in client_log
    finally:
        first.kill()
        if client is not None and client.poll() is None:
            client.kill()
            client.wait(10)
