"""The process's resident-set peak, without importing torch (trace tools use it too)."""

from __future__ import annotations

import ctypes
import ctypes.util
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
