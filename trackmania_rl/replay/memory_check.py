"""Whether the replay a config asks for fits this machine's memory, said once at start (a warning, not a refusal).

The buffers are preallocated at the schedule's current capacity and grow to its largest; a checkpoint's save builds the
buffer's content oldest-first beside the live rings (`TransitionStorage.state_dict`), so at each save after the buffer
fills the learner holds its frames twice. A replay that does not fit twice is killed by the kernel at that save, tens
of minutes into a run, with no message of the trainer's (measured: Enduro at 400,000 transitions, 11.3 GB twice on
23 GiB, docs/runs/2026-11-29_enduro_buffer400k): the start-up log says so instead.
"""

from __future__ import annotations

import os

GB = 1e9


def machine_memory_bytes() -> int | None:
    """This machine's physical memory (None where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def replay_memory_warning(ring_bytes: int, capacity: int, largest_capacity: int, total_bytes: int | None) -> str | None:
    """The warning for the log, or None when the replay fits. `ring_bytes`: the preallocated bytes of the buffers made
    for `capacity` transitions (training and test); they scale with the capacity up to `largest_capacity`."""
    if total_bytes is None or capacity <= 0:
        return None
    ring = ring_bytes * max(largest_capacity, capacity) / capacity
    if 2 * ring <= total_bytes:
        return None
    return (
        f"the replay of {max(largest_capacity, capacity):,} transitions (memory_size_schedule's largest capacity) takes "
        f"~{ring / GB:.1f} GB, and a checkpoint's save copies it: ~{2 * ring / GB:.1f} GB at each save once it is full, "
        f"more than this machine's {total_bytes / GB:.1f} GB. The kernel may kill the run at such a save; lower the "
        "capacity in memory_size_schedule"
    )
