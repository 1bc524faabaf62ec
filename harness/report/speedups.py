"""Speedups at matched grid points, with their noise: the mean over paired repeats and its
interval, and the step-spread flag within jobs. Pure functions over the
`harness.results.table` DataFrame (no torch, no plotting).

Is a speedup more than run-to-run noise? A job's median step says how fast that run was; two
runs of the same job on a shared machine (or a cluster whose network other tenants share)
differ by more than their steps do. So the speedup at a grid point is measured once per
repeat, from each repeat's median step: repeat r of YaFSDP against repeat r of the baseline,
which ran next to it (the sweep alternates engines within a point, harness.sweep.order). The
estimate is the mean of those per-repeat speedups and the interval the paired Student t
interval over them:

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
from typing import TypeGuard

import pandas as pd

from harness.engines.registry import YAFSDP
from harness.jobdir.grid_point import GridPoint
from harness.jobdir.rounds import same_round
from harness.report.matching import LossParity, by_point, metric, repeat_of, value
from harness.report.run_conditions import cpu_share_range, uneven_interference

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


# The p10-p90 range of fewer timed steps says nothing of the noise: one step has a range of
# 0, two have one difference for a range; such a spread cannot judge a speedup.
MIN_STEPS_FOR_SPREAD = 3


@dataclass(frozen=True)
class Speedup:
    """One row of a published table: a grid point, YaFSDP against one baseline.

    With repeats, `yafsdp` and `baseline` are each engine's first finished run (for its
    status and the planner's terms), the times the median over the runs' medians, and the
    speedup the mean over paired repeats with its interval (harness.report.speedups).
    """

    key: GridPoint
    yafsdp: pd.Series | None
    baseline: pd.Series | None
    speedup_pct: float | None  # (T_fsdp - T_yafsdp) / T_fsdp * 100
    spread_pct: float | None  # the largest p10-p90 range of the runs, in % of T_fsdp
    loss_mismatch: bool
    estimate: Estimate | None = None  # over the paired repeats
    t_yafsdp: float | None = None  # median over the ok runs of each run's median step
    t_baseline: float | None = None
    interference: str | None = None  # why the point's runs ran under uneven interference
    timed_steps: int | None = None  # the fewest timed steps of any paired run; None: unknown
    failed: int = 0  # repeats with both runs where one or both did not finish ok
    other_round: int = 0  # repeats whose two ok runs ran in different rounds: no pair
    unchecked: int = 0  # pairs whose results record no round (older results)
    # the least and most of the machine's CPUs other processes took in any paired run
    other_cpu_share: tuple[float, float] | None = None
    # the paired repeat whose speedup is the median of the pairs' (the lower middle one of
    # an even count): the runs the measured why explains, and how many pairs there were
    median_pair: tuple[pd.Series, pd.Series] | None = None
    pairs: int = 0

    @property
    def too_few_steps(self) -> bool:
        """Fewer than MIN_STEPS_FOR_SPREAD timed steps: their spread cannot judge."""
        return self.timed_steps is not None and self.timed_steps < MIN_STEPS_FOR_SPREAD

    @property
    def repeats(self) -> int:
        """Paired runs the speedup stands on (0: none finished on both sides)."""
        return self.estimate.n if self.estimate is not None else 0

    @property
    def significant(self) -> bool | None:
        """True when the interval over repeats excludes 0; None where run-to-run noise was
        not measured (one repeat) or there is no speedup."""
        return None if self.estimate is None else self.estimate.significant

    @property
    def beyond_spread(self) -> bool | None:
        """The second flag, within jobs: the speedup exceeds the spread of step times.

        |T_fsdp - T_yafsdp| must be larger than the p10-p90 range of either engine's step
        times; otherwise one step-to-step swing could produce it. None where it cannot be
        judged: no spread, or one of fewer than MIN_STEPS_FOR_SPREAD timed steps.
        """
        if self.speedup_pct is None or self.spread_pct is None or self.too_few_steps:
            return None
        return abs(self.speedup_pct) > self.spread_pct


def _spread_s(row: pd.Series) -> float | None:
    p10, p90 = metric(row, "iteration_time_p10_s"), metric(row, "iteration_time_p90_s")
    if p10 is None or p90 is None:
        return None
    return float(p90) - float(p10)


def _timed_steps(*rows: pd.Series) -> int | None:
    counts = [len(times) for r in rows if (times := metric(r, "step_times_s")) is not None]
    return min(counts) if len(counts) == len(rows) else None


def _time(row: pd.Series) -> float:
    return float(metric(row, "iteration_time_s"))


def _runs(group: pd.DataFrame, engine: str) -> dict[int, pd.Series]:
    """The engine's runs at a point by repeat, in repeat order."""
    rows = {repeat_of(r): r for _, r in group.iterrows() if r["engine"] == engine}
    return dict(sorted(rows.items()))


def _representative(runs: dict[int, pd.Series]) -> pd.Series | None:
    ok = [r for r in runs.values() if _ok(r)]
    return ok[0] if ok else next(iter(runs.values()), None)


def _median_time(rows: list[pd.Series]) -> float | None:
    times = [_time(r) for r in rows if _ok(r)]
    return float(statistics.median(times)) if times else None


@dataclass(frozen=True)
class Pairing:
    """Repeat r of YaFSDP with repeat r of the baseline: paired only when both finished ok
    in one round (harness.jobdir.rounds: one runner invocation, the engines taking turns),
    so a pair never joins runs of a resume or of another sweep, days apart."""

    pairs: list[tuple[pd.Series, pd.Series]]
    failed: int  # repeats where either run did not finish ok
    other_round: int  # both ok, but measured in different rounds
    unchecked: int  # paired, though a result records no round (older results)


def pair_repeats(mine: dict[int, pd.Series], theirs: dict[int, pd.Series]) -> Pairing:
    pairs, failed, other_round, unchecked = [], 0, 0, 0
    for r in (r for r in mine if r in theirs):
        y, f = mine[r], theirs[r]
        if not (_ok(y) and _ok(f)):
            failed += 1
            continue
        together = same_round(value(y, "round"), value(f, "round"))
        if together is False:
            other_round += 1
            continue
        unchecked += together is None
        pairs.append((y, f))
    return Pairing(pairs, failed, other_round, unchecked)


def point_speedup(
    key: GridPoint, group: pd.DataFrame, baseline: str, *, void: bool = False
) -> Speedup:
    """The speedup at one point from every run of YaFSDP and `baseline` there; the times
    are the medians over the runs the speedup stands on (every ok run where none pairs)."""
    mine, theirs = _runs(group, YAFSDP), _runs(group, baseline)
    paired = pair_repeats(mine, theirs)
    pairs = paired.pairs
    estimate = paired_speedup([(_time(y), _time(f)) for y, f in pairs])
    spreads = [
        max(sy, sf) / _time(f) * 100.0
        for y, f in pairs
        if (sy := _spread_s(y)) is not None and (sf := _spread_s(f)) is not None
    ]
    return Speedup(
        key,
        _representative(mine),
        _representative(theirs),
        None if estimate is None else estimate.speedup_pct,
        max(spreads) if spreads and len(spreads) == len(pairs) else None,
        void,
        estimate=estimate,
        t_yafsdp=_median_time([y for y, _ in pairs] or list(mine.values())),
        t_baseline=_median_time([f for _, f in pairs] or list(theirs.values())),
        interference=uneven_interference([row for pair in pairs for row in pair]),
        timed_steps=min(
            (s for y, f in pairs if (s := _timed_steps(y, f)) is not None), default=None
        ),
        failed=paired.failed,
        other_round=paired.other_round,
        unchecked=paired.unchecked,
        other_cpu_share=cpu_share_range([row for pair in pairs for row in pair]),
        median_pair=_median_pair(pairs),
        pairs=len(pairs),
    )


def _median_pair(pairs: list[tuple[pd.Series, pd.Series]]) -> tuple[pd.Series, pd.Series] | None:
    """The pair whose speedup is the median over the pairs (the lower of the middle two)."""
    if not pairs:
        return None
    ranked = sorted(pairs, key=lambda p: (_time(p[1]) - _time(p[0])) / _time(p[1]))
    return ranked[(len(ranked) - 1) // 2]


def speedups(df: pd.DataFrame, baseline: str, parity: list[LossParity]) -> list[Speedup]:
    """The published table's rows for one baseline: every grid point where either ran."""
    void = {p.key for p in parity if p.mismatch}
    both = df[df["engine"].isin([YAFSDP, baseline])]
    return [point_speedup(key, group, baseline, void=key in void) for key, group in by_point(both)]


def _ok(row: pd.Series | None) -> TypeGuard[pd.Series]:
    return row is not None and row["status"] == "ok" and metric(row, "iteration_time_s") is not None
