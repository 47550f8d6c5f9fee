"""The run's TensorBoard logger: a write that fails pauses the logging with one line instead of stopping the run,
and a new event file is opened once the folder can be written again."""

import shutil

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from trackmania_rl.monitoring.tensorboard import RunLogger


def _scalars(folder, tag: str) -> list[tuple[int, float]]:
    points = []
    for events in sorted(folder.glob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        if tag in accumulator.Tags()["scalars"]:
            points += [(event.step, event.value) for event in accumulator.Scalars(tag)]
    return sorted(points)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the writer's own thread
def test_a_removed_folder_pauses_the_logging_once_then_a_new_event_file_takes_the_points(tmp_path):
    folder = tmp_path / "tb" / "run"
    lines = []
    logger = RunLogger(folder, resolved_config={"batch_size": 512}, log=lines.append)
    logger.scalar("training/loss", 1.0, 1)
    logger.flush()
    failed_writer_thread = logger.writer.file_writer.event_writer._async_writer._worker
    shutil.rmtree(folder)  # the folder gone mid-run (deleted by hand, a disk unmounted)

    for step in range(2, 40):  # the failure shows at a later write: every one after it must be absorbed
        logger.scalar("training/loss", float(step), step)
        logger.race("eval_trained", {"race_time_s": 1.0}, step)
        logger.flush()
    assert sum("TensorBoard logging paused" in line for line in lines) == 1, lines
    failed_writer_thread.join(10)  # its error reported within this test, not in whichever test runs next
    assert not failed_writer_thread.is_alive()

    logger.RETRY_S = 0.0  # the next write tries a new event file at once
    logger._retry_at = 0.0
    logger.scalar("training/loss", 50.0, 50)
    logger.close()
    assert any("resumed in a new event file" in line for line in lines), lines
    assert (50, 50.0) in _scalars(folder, "training/loss")
