"""Peak memory: CUDA allocator statistics on GPUs; profiler allocation events on CPU."""

from __future__ import annotations

import ctypes
import ctypes.util
import gzip
import json
import re
import resource
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch

T = TypeVar("T")


class MemoryLimitExceeded(MemoryError):
    """The job went over its configured `memory_limit_gb`; reported as status oom."""


_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def peak_rss_bytes() -> int:
    """The process's resident-set high-water mark: since `reset_peak_rss` where that worked
    (Linux VmHWM), else over the process's life."""
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


def check_limit(limit_gb: float, device: torch.device) -> None:
    if limit_gb <= 0:
        return
    used = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else peak_rss_bytes()
    if used > limit_gb * 2**30:
        raise MemoryLimitExceeded(
            f"peak memory {used / 2**30:.2f} GiB exceeds memory_limit_gb={limit_gb}"
        )


def cpu_peak_allocated(run: Callable[[], T]) -> tuple[T, int]:
    """Run `run` under the profiler's memory tracking; return its value and the peak bytes
    the CPU allocator held at any moment (everything it allocated counts, so `run` must
    start before the model and engine state are allocated)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        value = run()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "memory_trace.json"
        prof.export_chrome_trace(str(path))
        peak = max_total_allocated(path)
    return value, peak


def max_total_allocated(trace_path: Path) -> int:
    opener = gzip.open if trace_path.suffix == ".gz" else open
    with opener(trace_path, "rt") as f:
        events = json.load(f).get("traceEvents", [])
    peak = 0
    for event in events:
        if event.get("name") == "[memory]":
            args = event.get("args", {})
            if args.get("Device Type", 0) == 0:  # CPU
                peak = max(peak, int(args.get("Total Allocated", 0)))
    return peak
