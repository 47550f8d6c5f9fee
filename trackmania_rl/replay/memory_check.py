"""Whether the replay a config asks for fits this machine's memory, said once at start (a warning, not a refusal).

The buffers are preallocated at the schedule's current capacity and grow to its largest; their pages are touched as
they fill, so a replay too big for the machine is killed by the kernel tens of minutes into a run, with no message of
the trainer's. A checkpoint's save writes the rings as they are (`TransitionStorage.state_dict`: no copy; it once
built a second copy and so killed Enduro at 400,000 transitions, 11.3 GB twice on 23 GiB,
docs/runs/2026-11-29_enduro_buffer400k), but the rest of the run needs room too: the networks, the collectors, a
resize's copy of the content. The start-up log warns when the replay alone would take more than REPLAY_SHARE of the
machine.
"""

from __future__ import annotations

import os

GB = 1e9
REPLAY_SHARE = 0.75  # of the machine's memory; the rest for the processes, the page cache and a resize's copy


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
    if ring <= REPLAY_SHARE * total_bytes:
        return None
    return (
        f"the replay of {max(largest_capacity, capacity):,} transitions (memory_size_schedule's largest capacity) takes "
        f"~{ring / GB:.1f} GB once it is full, more than {REPLAY_SHARE:.0%} of this machine's {total_bytes / GB:.1f} GB "
        "(the processes need the rest). The kernel may kill the run when it fills; lower the capacity in memory_size_schedule"
    )
