"""One CPU peak per sweep for MFU, and its spread.

On CPU each job measures its matmul peak at start-up (harness.rank.metrics). Those
measurements vary widely on a shared machine (3.9x across one demo), so an MFU from each
job's own peak compares jobs on different scales. The report takes one peak per host and
thread count, the median of its jobs' measurements, for every CPU job's MFU, and shows the
spread it was taken from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from harness.report.compare import metric, value


@dataclass(frozen=True)
class CpuPeak:
    median: float  # FLOP/s
    low: float
    high: float
    jobs: int

    def describe(self) -> str:
        t = 1e12
        return (
            f"median {self.median / t:.3g} TFLOP/s of {self.jobs} jobs' measurements "
            f"(spread {self.low / t:.3g}–{self.high / t:.3g}, ×{self.high / self.low:.2g})"
        )


def is_cpu_measured(row: pd.Series) -> bool:
    source = metric(row, "peak_flops_source") or ""
    return str(source).startswith("measured") and "CPU" in str(source)


def _machine(row: pd.Series) -> tuple[Any, Any]:
    return value(row, "host"), value(row, "threads_per_rank")


def cpu_peaks(df: pd.DataFrame) -> dict[tuple[Any, Any], CpuPeak]:
    """The sweep's CPU peak per (host, threads per rank), from its ok CPU jobs."""
    found: dict[tuple[Any, Any], list[float]] = {}
    for _, row in df[df["status"] == "ok"].iterrows():
        peak = metric(row, "peak_flops_per_device")
        if peak is not None and is_cpu_measured(row):
            found.setdefault(_machine(row), []).append(float(peak))
    return {
        k: CpuPeak(float(pd.Series(v).median()), min(v), max(v), len(v)) for k, v in found.items()
    }


def cpu_mfu(row: pd.Series, peaks: dict[tuple[Any, Any], CpuPeak]) -> float | None:
    """The job's MFU against its machine's one peak; None where the job is no CPU job."""
    peak = peaks.get(_machine(row)) if is_cpu_measured(row) else None
    tflops = metric(row, "tflops_per_device")
    if peak is None or tflops is None:
        return None
    return float(tflops) * 1e12 / peak.median
