"""Load (issue 15 point 7, short version; the 2-minute one: python -m trackmania_rl.benchmarks.http --load):
8 replay client processes against a real scripts/train.py --listen whose learner cannot keep up (a queue of
4 races, an off-policy tolerance of 1). No error, the queue never beyond its capacity, the learner's memory
flat once warm, `paused` answered and honoured (the clients wait instead of meeting a full queue)."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")

from trackmania_rl.benchmarks.http import load_test  # noqa: E402

pytestmark = [pytest.mark.http, pytest.mark.slow]


def test_eight_clients_against_a_learner_that_cannot_keep_up(tmp_path):
    figures = load_test(tmp_path, clients=8, seconds=25, log=lambda m: None)
    answers = figures["answers"]
    assert figures["client_exit_codes"] == [0] * 8, figures
    assert answers["other"] == 0 and answers["network_errors"] == 0 and figures["status_failures"] == 0, figures
    assert figures["races_received"] > 0 and figures["learner_step"] > 0, figures
    assert figures["races_dropped"]["invalid"] == 0 and figures["races_dropped"]["bad_request"] == 0, figures
    assert figures["queue_size_max_seen"] <= figures["queue_capacity"] == 4, figures
    assert figures["rss_mb_growth_after_first_quarter"] < 100, figures
    assert answers["paused_answers"] > 0 and figures["paused_fraction_of_samples"] > 0, figures  # paused seen
    # honoured: clients told to pause wait, so a full queue (429) stays rarer than accepted races; 8 clients
    # ignoring it would meet the full queue at every try
    assert answers["429"] <= answers["202"], figures
    assert figures["learner_exit_code"] == 0, figures
