"""What the CPUs of this node were busy with, from /proc, without torch.

`node_busy_s` is the node's CPU time spent busy (all CPUs, all processes) since boot;
`own_cpu_s` this process's (all its threads: gloo's, OpenMP's); both None where /proc is
not there (not Linux). Their differences over a window give the CPU time other processes
took in it.
"""

from __future__ import annotations

import os
from pathlib import Path

_PROC_STAT = Path("/proc/stat")
# /proc/stat's `cpu` line: user nice system idle iowait irq softirq steal guest guest_nice.
# Busy is all but idle and iowait; guest time is already inside user and nice.
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


def _ticks_per_s() -> int:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):
        return 100


def node_busy_s(stat: Path = _PROC_STAT) -> float | None:
    """Busy CPU seconds of the whole node since boot (None without /proc/stat)."""
    try:
        first = stat.read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if not first or first[0] != "cpu":
        return None
    values = [int(v) for v in first[1:]]
    return sum(values[i] for i in _BUSY_FIELDS if i < len(values)) / _ticks_per_s()


def own_cpu_s() -> float:
    """This process's user and system CPU seconds, every thread included."""
    times = os.times()
    return times.user + times.system


def load_average_1m() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def node_cpus() -> int:
    """The node's logical CPUs (not this process's affinity: others may run on the rest)."""
    return os.cpu_count() or 1
