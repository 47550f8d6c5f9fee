"""Keep the memory a train step frees for the next one (glibc's malloc; other C libraries are left as they are).

A train step allocates and frees the same tens of MB of activations and gradients every time. glibc serves
blocks above its mmap threshold with fresh mappings, and gives the free top of its heap back to the OS above
its trim threshold; both adapt to the sizes seen, but a step's pattern (many blocks of a few MB, all freed at
its end) often keeps them low, so every step faults its pages in again, zeroed by the kernel. Measured on an AMD
EPYC (Zen 4), batch 128, one thread, in fresh processes like the learner's: the float32 step 97.5 -> 82.5 ms, the
bfloat16 step 51.2 -> 49.5 ms (docs/performance-history.md). Fixing both thresholds above a step's working set
keeps the freed pages in the process: its resident memory stays at its peak (the peak itself did not change).
"""

from __future__ import annotations

import ctypes
import platform

# mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's largest on 64 bits; bigger blocks (replay storage) still get their own mapping
TRIM_THRESHOLD_BYTES = 512 << 20  # above a batch-512 step's transient memory


def keep_freed_memory_for_reuse() -> str:
    """Set glibc's thresholds for this process (and the processes it forks); returns a line for the log."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return f"allocator: {platform.system()} {platform.libc_ver()[0] or 'libc'} left as it is (the tuning is for glibc)"
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if not (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)):
        return "allocator: glibc refused the thresholds; left as it is"
    return (
        f"allocator: glibc keeps freed memory for reuse (mmap threshold {MMAP_THRESHOLD_BYTES >> 20} MiB, "
        f"trim threshold {TRIM_THRESHOLD_BYTES >> 20} MiB)"
    )
