"""scripts/watch.py's video writer streams: peak memory does not grow with the race's length."""

import json
import subprocess
import sys

import pytest

from trackmania_rl.evaluation import video as race_video

HEIGHT, WIDTH = 240, 792  # a watch.py GIF frame at its default height: ~570 KB of RGB
MEASURE = f"""
import json, resource, sys
import numpy as np
from trackmania_rl.evaluation.video import VideoWriter

path, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
noise = (rng.integers(0, 6, ({HEIGHT}, {WIDTH}, 3)) * 51).astype(np.uint8)  # 216 colours, as few as a race view
with VideoWriter(path, fps=50) as writer:
    for k in range(n):
        frame = np.roll(noise, k, axis=1)  # every frame different, as in a race
        frame[:, :40] = k % 256
        writer.write(frame)
print(json.dumps({{"frames": writer.frames_written, "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}}))
"""


def peak_rss_kb(path, frames: int) -> int:
    result = subprocess.run([sys.executable, "-c", MEASURE, str(path), str(frames)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout.strip().splitlines()[-1])
    assert record["frames"] == frames
    return record["peak_rss_kb"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "suffix", [".gif", pytest.param(".mp4", marks=pytest.mark.skipif(not race_video.mp4_available(), reason="MP4 needs imageio-ffmpeg"))]
)
def test_peak_memory_does_not_grow_with_the_number_of_frames(tmp_path, suffix):
    import imageio.v3 as iio

    short = peak_rss_kb(tmp_path / f"short{suffix}", 100)
    long = peak_rss_kb(tmp_path / f"long{suffix}", 400)
    held_if_kept = 300 * HEIGHT * WIDTH * 3 // 1024  # the 300 extra frames, had they been kept (~170 MB)
    growth = long - short
    assert growth < held_if_kept / 10, f"peak RSS grew by {growth} kB for 300 more frames (keeping them would take {held_if_kept} kB)"
    if suffix == ".gif":
        frames = iio.imread(tmp_path / "long.gif", index=None)
        assert frames.shape == (400, HEIGHT, WIDTH, 3)
        assert (frames[7, :, :40] == 7).all() and (frames[399, :, :40] == 399 % 256).all()
