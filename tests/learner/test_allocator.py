"""The learner's allocator setting (trackmania_rl/learner/allocator.py): the memory a train step frees is reused by
the next step instead of being given back to the OS and faulted in again. The case runs in a fresh interpreter,
where glibc starts from its defaults (whose adaptive thresholds keep the pages only in some runs)."""

import platform
import subprocess
import sys

import pytest

# "Steps" that each allocate and touch 24 blocks of 6 MiB (about a train step's activations) and free them all;
# after two warm-up steps, prints the minor page faults of three more.
STEPS = """
import resource, sys, torch
from trackmania_rl.learner.allocator import keep_freed_memory_for_reuse
print(keep_freed_memory_for_reuse())
def step():
    blocks = [torch.ones(6 << 18) for _ in range(24)]
    del blocks
step()
step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
PAGES_PER_STEP = 24 * (6 << 20) // 4096  # with 4 KiB pages


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="the setting is for glibc's malloc")
def test_memory_freed_by_a_step_is_reused_by_the_next_without_page_faults():
    done = subprocess.run([sys.executable, "-c", STEPS], capture_output=True, text=True, timeout=120, check=True)
    line, faults = done.stdout.strip().splitlines()
    assert line.startswith("allocator: glibc keeps freed memory for reuse"), line
    assert int(faults) < PAGES_PER_STEP // 10, f"{faults} page faults in 3 steps of {PAGES_PER_STEP} pages each"
