"""`pipeline.ingest_stages_ms`: the per-race stages `benchmark.py ray` prints (ray.ingest_stages_ms), as medians."""

import pytest

from trackmania_rl.benchmarks.pipeline import ingest_stages_ms


def _figures(take, validate, store, stages=()):
    total = [t + v + s for t, v, s in zip(take, validate, store, strict=True)]
    return {"take_ms": take, "validate_ms": validate, "store_ms": store, "ingest_ms": total, "take_stages": list(stages)}


def test_a_source_that_does_not_split_its_take_gives_take_validate_store_and_total():
    stages = ingest_stages_ms(_figures([1.0, 3.0, 2.0], [0.1, 0.3, 0.2], [1.0, 1.0, 4.0]))
    assert stages == {"take": 2.0, "validate": 0.2, "store": 1.0, "total": 4.3}


def test_a_split_take_gives_each_stage_and_the_rest_of_get():
    splits = [{"object_store_get": 0.5, "unpack": 0.1, "ask": 0.3}, {"object_store_get": 0.7, "unpack": 0.1, "ask": 0.5}]
    stages = ingest_stages_ms(_figures([1.5, 2.5], [0.2, 0.2], [1.0, 1.0], splits))
    assert stages["take_object_store_get"] == pytest.approx(0.6) and stages["take_ask"] == pytest.approx(0.4)
    assert stages["take_other"] == pytest.approx((0.6 + 1.2) / 2)  # the take less its named stages, per race
    assert list(stages) == ["take", "take_object_store_get", "take_unpack", "take_ask", "take_other", "validate", "store", "total"]


def test_a_receiver_threads_stages_come_after_the_total_and_are_not_in_it():
    figures = _figures([0.4, 0.6], [0.2, 0.2], [1.0, 1.0], [{"unpack": 0.3}, {"unpack": 0.5}])
    figures["receive_stages"] = [{"object_store_get": 0.8, "ask": 1.0}, {"object_store_get": 1.2, "ask": 1.4}]
    stages = ingest_stages_ms(figures)
    assert stages["total"] == pytest.approx(1.7) and stages["take_other"] == pytest.approx(0.1)
    assert stages["receiver_object_store_get"] == pytest.approx(1.0) and stages["receiver_ask"] == pytest.approx(1.2)
    assert list(stages)[-2:] == ["receiver_object_store_get", "receiver_ask"]
