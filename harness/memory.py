"""Peak memory: CUDA allocator statistics on GPUs; profiler allocation events on CPU."""

from __future__ import annotations

import gzip
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch

from harness.rss import peak_rss_bytes

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
