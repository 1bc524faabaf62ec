"""Peak memory: CUDA allocator statistics on GPUs; profiler allocation events on CPU."""

from __future__ import annotations

import ctypes
import functools
import gzip
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import torch

from harness.rank.host_usage import peak_rss_bytes

T = TypeVar("T")


class MemoryLimitExceeded(MemoryError):
    """The job went over its configured `memory_limit_gb`; reported as status oom."""


def check_limit(limit_gb: float, device: torch.device) -> None:
    if limit_gb <= 0:
        return
    used = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else peak_rss_bytes()
    if used > limit_gb * 2**30:
        raise MemoryLimitExceeded(
            f"peak memory {used / 2**30:.2f} GiB exceeds memory_limit_gb={limit_gb}"
        )


def restart_cuda_peaks(device: torch.device) -> tuple[int, int]:
    """Finish queued work, then restart the allocator's high-water marks; return the peaks
    (allocated, reserved) reached until now."""
    torch.cuda.synchronize(device)
    peaks = torch.cuda.max_memory_allocated(device), torch.cuda.max_memory_reserved(device)
    torch.cuda.reset_peak_memory_stats(device)
    return peaks


@functools.cache
def _tally_flag() -> ctypes.c_bool | None:
    library = Path(torch.__file__).parent / "lib" / ("libc10" + _shared_suffix())
    try:
        return ctypes.c_bool.in_dll(
            ctypes.CDLL(str(library)), "FLAGS_caffe2_report_cpu_memory_usage"
        )
    except (OSError, ValueError):
        return None


def _shared_suffix() -> str:
    return {"win32": ".dll", "darwin": ".dylib"}.get(sys.platform, ".so")


@contextmanager
def frees_counted_on_every_thread() -> Iterator[bool]:
    """Make the CPU allocator's running total count frees made on any thread, inside.

    The profiler counts a free only on a thread it profiles. A tensor whose last reference
    dies on one of gloo's worker threads (a finished collective's buffer) is then never
    subtracted, and the tally drifts up by a timing-dependent amount (10-25% on a small
    model). c10's `caffe2_report_cpu_memory_usage` flag keeps the tally on every thread;
    it has no Python setter, so it is set through the symbol libc10 exports, and restored
    after (it costs about a microsecond per allocation). Yields whether it could be set."""
    flag = _tally_flag()
    if flag is None:
        yield False
        return
    previous = flag.value
    flag.value = True
    try:
        yield True
    finally:
        flag.value = previous


def cuda_memory_outside_allocator(device: torch.device) -> int | None:
    """Bytes in use on `device` that PyTorch's caching allocator does not hold: the CUDA
    context, NCCL's communication buffers, library workspaces. The device's used memory
    counts every process on it, so the figure is only this job's where each rank has a
    device of its own; None where ranks share one."""
    # as the worker reads it: without LOCAL_WORLD_SIZE, every rank is on this node
    ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    if ranks_here > torch.cuda.device_count():
        return None
    free, total = torch.cuda.mem_get_info(device)
    return max(0, total - free - torch.cuda.memory_reserved(device))


def cpu_peak_allocated(run: Callable[[], T]) -> tuple[T, int]:
    """Run `run` under the profiler's memory tracking; return its value and the peak bytes
    the CPU allocator held at any moment (everything it allocated counts, so `run` must
    start before the model and engine state are allocated)."""
    from torch.profiler import ProfilerActivity, profile

    with (
        frees_counted_on_every_thread(),
        profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof,
    ):
        value = run()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "memory_trace.json"
        prof.export_chrome_trace(str(path))
        peak = max_total_allocated(path)
    return value, peak


def max_total_allocated(trace_path: Path) -> int:
    """The largest running total of the trace's CPU allocation events, above the total the
    first of them started from: c10's tally is process-wide and keeps whatever an earlier
    tracked window allocated and freed untracked, so only the rise within this window is
    this window's."""
    opener = gzip.open if trace_path.suffix == ".gz" else open
    with opener(trace_path, "rt") as f:
        events = json.load(f).get("traceEvents", [])
    cpu = [
        e for e in events
        if e.get("name") == "[memory]" and e.get("args", {}).get("Device Type", 0) == 0
    ]  # fmt: skip
    if not cpu:
        return 0
    first = min(cpu, key=lambda e: float(e.get("ts", 0)))["args"]
    start = int(first.get("Total Allocated", 0)) - int(first.get("Bytes", 0))
    return max(int(e["args"].get("Total Allocated", 0)) for e in cpu) - start
