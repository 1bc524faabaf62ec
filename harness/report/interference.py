"""Did a point's runs meet very different interference? (result.json `metrics.interference`,
written by harness.rank.interference; no torch, no pandas needed.)

A speedup is only as good as the conditions its runs shared. The point's runs are flagged
when, between any two of them:
- the share of the machine's CPU time that other processes took during the timed steps
  differs by more than CPU_SHARE_GAP (25 points of the machine);
- on GPUs: other processes were on a device in some runs and in none in others; the median
  SM clock differs by more than CLOCK_GAP (10%); or a throttle reason (power, thermal,
  hardware slowdown) was seen in some runs only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

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
