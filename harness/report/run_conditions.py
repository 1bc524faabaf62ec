"""The conditions a sweep's runs met, which a speedup or an MFU is only as good as: the
interference each run met, and the CPU peak that CPU jobs' MFU is taken against (no torch).

Did a point's runs meet very different interference? (result.json `metrics.interference`,
written by harness.rank.interference; no torch, no pandas needed.)

A speedup is only as good as the conditions its runs shared. The point's runs are flagged
when, between any two of them:
- the share of the machine's CPU time that other processes took during the timed steps
  differs by more than CPU_SHARE_GAP (25 points of the machine);
- on GPUs: other processes were on a device in some runs and in none in others; the median
  SM clock differs by more than CLOCK_GAP (10%); or a throttle reason (power, thermal,
  hardware slowdown) was seen in some runs only.

One CPU peak per sweep for MFU, and its spread.

On CPU each job measures its matmul peak at start-up (harness.rank.metrics). Those
measurements vary widely on a shared machine (3.9x across one demo), so an MFU from each
job's own peak compares jobs on different scales. The report takes one peak per host and
thread count, the median of its jobs' measurements, for every CPU job's MFU, and shows the
spread it was taken from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from harness.report.matching import metric, value

CPU_SHARE_GAP = 0.25
CLOCK_GAP = 0.10
# Reasons that say nothing about interference: an idle GPU between steps, clocks set by an
# administrator for every run alike.
BENIGN_THROTTLES = frozenset({"gpu_idle", "applications_clocks_setting", "display_clock_setting"})
COLUMN = "interference"


def record_of(row: Mapping[str, Any] | Any) -> dict[str, Any] | None:
    """A results-table row's interference record, if it has one."""
    try:
        found = row[COLUMN]
    except (KeyError, IndexError, TypeError):
        return None
    return found if isinstance(found, dict) else None


def _numbers(records: Iterable[dict[str, Any]], key: str) -> list[float]:
    return [float(r[key]) for r in records if isinstance(r.get(key), (int, float))]


def uneven_interference(rows: Iterable[Mapping[str, Any] | Any]) -> str | None:
    """Why the runs in `rows` ran under very different interference, or None."""
    records = [r for r in map(record_of, rows) if r is not None]
    if len(records) < 2:
        return None
    reasons = []
    shares = _numbers(records, "other_cpu_share")
    if len(shares) > 1 and max(shares) - min(shares) > CPU_SHARE_GAP:
        reasons.append(f"other processes took {min(shares):.0%} to {max(shares):.0%} of the CPUs")
    gpus = [g for r in records if isinstance(g := r.get("gpu"), dict) and "unavailable" not in g]
    if len(gpus) > 1:
        reasons += _gpu_reasons(gpus)
    return "; ".join(reasons) or None


def cpu_share_range(rows: Iterable[Mapping[str, Any] | Any]) -> tuple[float, float] | None:
    """The least and most of the machine's CPU time other processes took in any of `rows`
    (fractions), or None where no run measured it."""
    shares = _numbers([r for r in map(record_of, rows) if r is not None], "other_cpu_share")
    return (min(shares), max(shares)) if shares else None


def _gpu_reasons(gpus: list[dict[str, Any]]) -> list[str]:
    reasons = []
    others = _numbers(gpus, "other_processes")
    if others and max(others) > 0 and min(others) == 0:
        reasons.append(f"other processes on the GPUs in some runs only (up to {max(others):.0f})")
    clocks = _numbers(gpus, "sm_clock_mhz_median")
    if clocks and max(clocks) > 0 and (max(clocks) - min(clocks)) / max(clocks) > CLOCK_GAP:
        reasons.append(f"median SM clock {min(clocks):.0f} to {max(clocks):.0f} MHz")
    seen = [set(g.get("throttle_reasons") or []) - BENIGN_THROTTLES for g in gpus]
    uneven = set.union(*seen) - set.intersection(*seen)
    if uneven:
        reasons.append(f"throttled ({', '.join(sorted(uneven))}) in some runs only")
    return reasons


def interference_cell(row: Mapping[str, Any] | Any) -> str:
    """One job's record in a table cell: `others 12% CPU, load 1.2→2.3`, and the GPU's."""
    record = record_of(row)
    if record is None:
        return "—"
    parts = []
    share = record.get("other_cpu_share")
    if isinstance(share, (int, float)):
        parts.append(f"others {share:.0%} CPU")
    a, b = record.get("load1_start"), record.get("load1_end")
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        parts.append(f"load {a:.1f}→{b:.1f}")
    gpu = record.get("gpu")
    if isinstance(gpu, dict):
        if "unavailable" in gpu:
            parts.append("GPU not watched")
        else:
            parts.append(f"SM {gpu.get('sm_clock_mhz_median', 0):.0f} MHz")
            if gpu.get("other_processes"):
                parts.append(f"{gpu['other_processes']} other GPU process(es)")
            throttled = sorted(set(gpu.get("throttle_reasons") or []) - BENIGN_THROTTLES)
            if throttled:
                parts.append("throttled: " + ", ".join(throttled))
    return ", ".join(parts) or "—"


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
