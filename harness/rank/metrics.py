"""Plain formulas for the figures in result.json (see README, Definitions)."""

from __future__ import annotations

import statistics
import time

# bf16 dense peaks (TFLOP/s) from NVIDIA's datasheets (their sparse figures halved), first
# match by device name wins: the H100's PCIe and NVL cards and the H200 NVL are slower
# than their SXM forms, so each NVL/PCIe name comes before its family's.
DEVICE_PEAK_TFLOPS = {
    "A100": 312.0,
    "H100 PCIe": 756.0,
    "H100 NVL": 835.0,
    "H100": 989.0,
    "H200 NVL": 835.0,
    "H200": 989.0,
}


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = int(pos), min(int(pos) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def step_time_summary(step_times_s: list[float]) -> dict[str, float]:
    return {
        "iteration_time_s": statistics.median(step_times_s),
        "iteration_time_p10_s": percentile(step_times_s, 10),
        "iteration_time_p90_s": percentile(step_times_s, 90),
    }


def throughput(
    *,
    iteration_time_s: float,
    tokens_per_step_per_device: int,
    flops_per_token: float,
    peak_flops_per_device: float | None,
) -> dict[str, float | None]:
    tokens_per_s = tokens_per_step_per_device / iteration_time_s
    flops_per_s = tokens_per_s * flops_per_token
    return {
        "tokens_per_s_per_device": tokens_per_s,
        "tflops_per_device": flops_per_s / 1e12,
        "mfu": flops_per_s / peak_flops_per_device if peak_flops_per_device else None,
    }


def spec_peak_flops(device_name: str) -> float | None:
    """The bf16 peak of a known GPU by name, else None."""
    for key, tflops in DEVICE_PEAK_TFLOPS.items():
        if key in device_name:
            return tflops * 1e12
    return None


def measure_matmul_peak_flops(
    dtype_name: str = "bf16", max_size: int = 1024, budget_s: float = 0.25
) -> float:
    """Best observed square-matmul FLOP/s on this CPU with the current thread count.

    The size doubles from 128 while one matmul takes under 10 ms, up to `max_size`, so
    a fast dtype is timed at a size that fills the cores and a slow one (bf16 on a CPU
    without native bf16: ~1 GFLOP/s, 2.4 s for one 1024-sized product) stays within
    about `budget_s` instead of costing every job many seconds. Best of 2 to 5 runs."""
    import torch

    from harness.dtypes import DTYPES

    dtype = DTYPES[dtype_name]

    def timed(size: int) -> tuple[float, torch.Tensor, torch.Tensor]:
        a = torch.randn(size, size).to(dtype)
        b = torch.randn(size, size).to(dtype)
        a @ b  # the first call pays for kernel selection
        start = time.perf_counter()
        a @ b
        return time.perf_counter() - start, a, b

    size = 128
    seconds, a, b = timed(size)
    while seconds < 0.01 and size < max_size:
        size *= 2
        seconds, a, b = timed(size)
    best = seconds
    for _ in range(max(1, min(4, int(budget_s / max(seconds, 1e-9)) - 1))):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 / best
