"""What this process and its node used of the host, from /proc and `resource`, without
torch (the trace tools and benchmarks use it too).

The process's resident-set peak (`peak_rss_bytes`, `reset_peak_rss`).

What the CPUs of this node were busy with: `node_busy_s` is the node's CPU time spent busy
(all CPUs, all processes) since boot; `own_cpu_s` this process's (all its threads: gloo's,
OpenMP's); both None where /proc is not there (not Linux). Their differences over a window
give the CPU time other processes took in it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import resource
import sys
from pathlib import Path

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def peak_rss_bytes() -> int:
    """The process's resident-set high-water mark: since `reset_peak_rss` where that worked
    (Linux VmHWM, which belongs to this exec's address space), else over the process's life
    (ru_maxrss, which on Linux even carries over the peak of the process that exec'd it)."""
    try:
        match = re.search(r"^VmHWM:\s+(\d+) kB", _STATUS.read_text(), re.M)
    except OSError:
        match = None
    if match:
        return int(match.group(1)) * 1024
    # ru_maxrss is KiB on Linux and bytes on macOS.
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def reset_peak_rss() -> bool:
    """Restart the RSS high-water mark from the current RSS; False where the OS cannot.

    Freed heap is handed back to the OS first (glibc malloc_trim), so memory that only an
    earlier phase needed (the profiler's allocation tracking, say) does not count. What the
    allocator still holds after that, fragmentation included, does.
    """
    libc_name = ctypes.util.find_library("c")
    if libc_name:
        libc = ctypes.CDLL(libc_name)
        if hasattr(libc, "malloc_trim"):
            libc.malloc_trim(0)
    try:
        _CLEAR_REFS.write_text("5")  # 5: reset the peak RSS (Linux >= 4.0)
    except OSError:
        return False
    return True


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
