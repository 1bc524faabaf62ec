"""Is a speedup more than run-to-run noise? A confidence interval over repeated runs.

A job's median step says how fast that run was; two runs of the same job on a shared
machine (or a cluster whose network other tenants share) differ by more than their steps
do. So the speedup at a grid point is measured once per repeat, from each repeat's median
step: repeat r of YaFSDP against repeat r of the baseline, which ran next to it (the sweep
alternates engines within a point, harness.sweep.order). The estimate is the mean of those
per-repeat speedups and the interval the paired Student t interval over them:

    s_r = (T_fsdp,r - T_yafsdp,r) / T_fsdp,r,   mean ± t(0.975, n-1) · sd(s_r) / sqrt(n)

Why not a bootstrap over repeats and steps: with the 2-5 repeats a sweep can afford, a
percentile bootstrap over repeats has at most n^n resamples and its interval is about the
range of the s_r: with 2 repeats it is [s_1, s_2], which excludes 0 whenever both lean the
same way, half of all A/A checks. Resampling the steps inside a run adds only the step noise,
which the repeat medians already carry. The t interval is exact for normal per-repeat noise
and wide when n is small, as it should be (t(0.975, 1) = 12.7): an A/A check comes out
significant 5% of the time, whatever n. No scipy: the quantiles are tabled.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95
METHOD = "paired Student t interval over repeats"
# t quantiles (0.975) for 1..30 degrees of freedom.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
_Z975 = 1.959964


def t_quantile_975(df: int) -> float:
    """Student t's 0.975 quantile; past 30 degrees of freedom, its Cornish-Fisher expansion
    around the normal's (off by less than 1e-4 there)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True)
class Estimate:
    """A speedup in percent over `n` paired repeats, and its interval (None with one)."""

    speedup_pct: float
    n: int
    low_pct: float | None = None
    high_pct: float | None = None

    @property
    def measured_noise(self) -> bool:
        """Whether run-to-run noise was measured at all (two or more repeats)."""
        return self.low_pct is not None and self.high_pct is not None

    @property
    def significant(self) -> bool | None:
        """True when the interval excludes 0; None with a single repeat (not measured)."""
        if self.low_pct is None or self.high_pct is None:
            return None
        return not self.low_pct <= 0.0 <= self.high_pct


def paired_speedup(times: Sequence[tuple[float, float]]) -> Estimate | None:
    """The speedup of (T_yafsdp, T_fsdp) pairs, one per repeat, each its run's median step;
    None without a pair."""
    speedups = [(t_f - t_y) / t_f * 100.0 for t_y, t_f in times if t_f > 0]
    n = len(speedups)
    if n == 0:
        return None
    mean = statistics.fmean(speedups)
    if n == 1:
        return Estimate(mean, 1)
    half = t_quantile_975(n - 1) * statistics.stdev(speedups) / math.sqrt(n)
    return Estimate(mean, n, mean - half, mean + half)
