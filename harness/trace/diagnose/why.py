"""Why one job's step is longer than another's: the traced difference, cause by cause.

Two jobs at the same grid point (`harness.jobdir.grid_point`) are compared on their records:
each rank's profiled steps attributed (`harness.trace.diagnose.attribute`), the exposed waits
for a late rank moved into their own cause (`harness.trace.diagnose.ranks`), as the job's
traced record holds them (`harness.trace.diagnose.traced`), and each step is read on its
slowest rank, the rank whose step was the step. The difference of the means over steps is
split by cause (the causes of a step sum to it, so the terms sum to the difference), and
a cause is split by unit where its attribution names them.

First it checks that the trace reproduces the timing: a profiled pass whose mean step
differs from the timed median by more than 25%, or a traced difference whose sign is not
the timed one, ran under other conditions (machine load, profiler overhead), and `why`
says so before anything else. No torch.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.jobdir.grid_point import GridPoint
from harness.jobdir.result import Result
from harness.models.unit_names import job_units, shown_by_unit
from harness.trace.diagnose import causes
from harness.trace.diagnose.attribute import StepAttribution
from harness.trace.diagnose.ranks import SKEW, SKEW_DESCRIPTION
from harness.trace.diagnose.traced import steps_of

# The profiled pass's mean step may differ from the timed median by this much (a fraction).
TRACE_TOLERANCE = 0.25
# Terms smaller than this share of the longer step are folded into one line.
SHOWN_FRACTION = 0.005
UNITS_SHOWN = 3


class WhyError(ValueError):
    """Two jobs that cannot be compared (another grid point, no result, no traces)."""


def describe(cause: str) -> str:
    return SKEW_DESCRIPTION if cause == SKEW else causes.DESCRIPTIONS.get(cause, cause)


@dataclass(frozen=True)
class JobRecords:
    """What `why` reads of one job: its name (a job directory, for the lines), its measured
    record (result.json) and its traced record (harness.trace.diagnose.traced)."""

    job_dir: Path
    result: Result
    traced: dict[str, Any]


@dataclass(frozen=True)
class TracedJob:
    """One job's traced step: its slowest rank's, averaged over the profiled steps."""

    job_dir: Path
    label: str
    point: GridPoint
    timed_s: float | None  # the timed steps' median (result.json)
    step_s: float  # the profiled steps' mean, each on its slowest rank
    causes: dict[str, float]  # mean seconds per step
    by_unit: dict[str, dict[str, float]]  # units by module path (`harness.models.unit_names`)
    slowest_ranks: dict[int, int]  # rank -> how many steps it was the slowest in
    late: list[str]  # the late arrivals at collectives, one line each
    notes: list[str]  # what the cross-rank split had to do without


def _slowest_steps(steps: list[StepAttribution]) -> list[StepAttribution]:
    by_step: dict[int, StepAttribution] = {}
    for s in steps:
        best = by_step.get(s.step)
        if best is None or (s.step_s, -s.rank) > (best.step_s, -best.rank):
            by_step[s.step] = s
    return [by_step[k] for k in sorted(by_step)]


def _mean(steps: list[StepAttribution]) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    total: dict[str, float] = defaultdict(float)
    units: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for s in steps:
        for c, v in s.causes.items():
            total[c] += v / len(steps)
        for c, per_unit in s.by_unit.items():
            for u, v in per_unit.items():
                units[c][u] += v / len(steps)
    return dict(total), {c: dict(u) for c, u in units.items()}


def traced_job(job: JobRecords, rank: int | None = None) -> TracedJob:
    """One job's records read as its traced step: each step on its slowest rank, or on
    `rank`; raise WhyError naming the job when it cannot."""
    if "error" in job.traced:
        raise WhyError(f"{job.job_dir}: {job.traced['error']}")
    steps = steps_of(job.traced)
    if not steps:
        raise WhyError(f"{job.job_dir}: its traces hold no profiled step")
    if rank is None:
        slowest = _slowest_steps(steps)
    else:
        slowest = sorted((s for s in steps if s.rank == rank), key=lambda s: s.step)
        if not slowest:
            raise WhyError(f"{job.job_dir}: its traces hold no step of rank {rank}")
    mean_causes, mean_units = _mean(slowest)
    result = job.result
    return TracedJob(
        job_dir=job.job_dir,
        label=str(result.engine.get("label") or result.engine.get("name") or job.job_dir.name),
        point=GridPoint.of(result.config),
        timed_s=result.metrics.iteration_time_s,
        step_s=sum(s.step_s for s in slowest) / len(slowest),
        causes=mean_causes,
        by_unit=shown_by_unit(mean_units, job_units(result.engine_settings)),
        slowest_ranks=dict(Counter(s.rank for s in slowest)),
        late=list(job.traced.get("late", [])),
        notes=list(job.traced.get("notes", [])),
    )


def check_same_point(a: JobRecords, b: JobRecords) -> None:
    """Raise WhyError, naming the fields, when the jobs are at different grid points."""
    da = GridPoint.of(a.result.config).to_dict()
    db = GridPoint.of(b.result.config).to_dict()
    differ = [f"{k}: {da[k]!r} vs {db[k]!r}" for k in da if da[k] != db.get(k)]
    if differ:
        raise WhyError(
            f"{a.job_dir} and {b.job_dir} are at different grid points ({'; '.join(differ)}); "
            "compare jobs of one point"
        )


def _trace_warnings(a: TracedJob, b: TracedJob) -> list[str]:
    out = []
    for j in (a, b):
        if j.timed_s is None:
            out.append(f"{j.label}: no timed median in result.json to check the trace against")
        elif abs(j.step_s - j.timed_s) > TRACE_TOLERANCE * j.timed_s:
            out.append(
                f"{j.label}: the traced step ({j.step_s:.4f} s) differs from the timed median "
                f"({j.timed_s:.4f} s) by {100 * (j.step_s / j.timed_s - 1):+.0f}%, more than "
                f"{TRACE_TOLERANCE:.0%}: machine load or profiler overhead made the trace "
                "another run"
            )
    if a.timed_s is not None and b.timed_s is not None:
        traced, timed = b.step_s - a.step_s, b.timed_s - a.timed_s
        if traced * timed < 0:
            out.append(
                f"the traced difference ({traced:+.4f} s) has another sign than the timed one "
                f"({timed:+.4f} s): the traces do not show what the timing measured"
            )
    return out


def compare(a: TracedJob, b: TracedJob) -> dict[str, Any]:
    """B against A, cause by cause (JSON-ready); the caller checked their grid points."""
    order = {c: i for i, c in enumerate((*causes.ORDER, SKEW))}
    terms: list[dict[str, Any]] = []
    for cause in sorted({*a.causes, *b.causes}, key=lambda c: order.get(c, len(order))):
        ua, ub = a.by_unit.get(cause, {}), b.by_unit.get(cause, {})
        units = {u: ub.get(u, 0.0) - ua.get(u, 0.0) for u in {*ua, *ub}}
        terms.append(
            {
                "cause": cause,
                "description": describe(cause),
                "delta_s": b.causes.get(cause, 0.0) - a.causes.get(cause, 0.0),
                "a_s": a.causes.get(cause, 0.0),
                "b_s": b.causes.get(cause, 0.0),
                "units": dict(sorted(units.items(), key=lambda kv: -abs(kv[1]))),
                "units_a": ua,
                "units_b": ub,
            }
        )
    terms.sort(key=lambda t: -abs(t["delta_s"]))
    return {
        "warnings": _trace_warnings(a, b),
        "a": _job_json(a),
        "b": _job_json(b),
        "difference_s": b.step_s - a.step_s,
        "timed_difference_s": None
        if a.timed_s is None or b.timed_s is None
        else b.timed_s - a.timed_s,
        "terms": terms,
    }


def _job_json(j: TracedJob) -> dict[str, Any]:
    return {
        "job_dir": str(j.job_dir),
        "label": j.label,
        "step_s": j.step_s,
        "timed_median_s": j.timed_s,
        "slowest_ranks": {str(r): n for r, n in sorted(j.slowest_ranks.items())},
        "causes": j.causes,
        "late_arrivals": j.late,
        "notes": j.notes,
    }


def why(a: JobRecords, b: JobRecords, rank: int | None = None) -> dict:
    """`compare` of two jobs' records at one grid point (else WhyError), each step read on
    its slowest rank, or on `rank` in both jobs. A function of two records: nothing here
    reads a job directory (`harness.trace.jobs` reads them, cached)."""
    check_same_point(a, b)
    return {**compare(traced_job(a, rank), traced_job(b, rank)), "rank": rank}


def _slowest(job: dict[str, Any]) -> str:
    ranks = job["slowest_ranks"]
    steps = sum(ranks.values())
    return ", ".join(f"rank {r} in {n} of {steps} steps" for r, n in ranks.items())


def _top(units: dict[str, float], floor: float, signed: bool = True) -> str:
    big = sorted(((u, v) for u, v in units.items() if abs(v) >= floor), key=lambda kv: -abs(kv[1]))
    fmt = "+.4f" if signed else ".4f"
    words = ", ".join(f"{u or '(no unit)'} {v:{fmt}} s" for u, v in big[:UNITS_SHOWN])
    more = len(big) - UNITS_SHOWN
    return words + (f", and {more} more units" if more > 0 else "")


def _unit_words(term: dict[str, Any], a: str, b: str, floor: float) -> str:
    """Per unit where the jobs name units alike (or one has none of the cause); else each
    job's own largest units (engines name their units differently: FSDP1's carry none)."""
    ua, ub = term["units_a"], term["units_b"]
    alike = bool(ua.keys() & ub.keys())
    if alike or (not ua and not term["a_s"]) or (not ub and not term["b_s"]):
        words = _top(term["units"], floor)
        return f" [{words}]" if words else ""
    sides = [
        f"{label} has {_top(u, floor, signed=False)}"
        for label, u in ((b, ub), (a, ua))
        if _top(u, floor)
    ]
    return f" [{'; '.join(sides)}]" if sides else ""


def why_lines(found: dict[str, Any]) -> list[str]:
    """The comparison in words: warnings first, then B against A term by term."""
    a, b = found["a"], found["b"]
    lines = [f"warning: {w}" for w in found["warnings"]]
    floor = SHOWN_FRACTION * max(a["step_s"], b["step_s"])
    shown, rest = [], 0.0
    for t in found["terms"]:
        if abs(t["delta_s"]) < floor:
            rest += t["delta_s"]
            continue
        shown.append(f"{t['delta_s']:+.4f} s {t['description']} ({t['cause']})"
                     + _unit_words(t, a["label"], b["label"], floor))  # fmt: skip
    if abs(rest) > 0:
        shown.append(f"{rest:+.4f} s other causes, each under {SHOWN_FRACTION:.1%} of the step")
    timed = found["timed_difference_s"]
    which = "slowest rank's" if found.get("rank") is None else f"rank {found['rank']}'s"
    lines.append(
        f"{b['label']} {found['difference_s']:+.4f} s against {a['label']} (traced, {which} "
        f"step; timed {'n/a' if timed is None else f'{timed:+.4f} s'}), cause by cause:"
    )
    lines += [f"  {term}" for term in shown]  # one cause a line: a terminal, `| head`, grep
    for side in (a, b):
        lines.append(f"  {side['label']}: step {side['step_s']:.4f} s on "
                     f"{_slowest(side)}")  # fmt: skip
        lines += [f"    {line}" for line in side["late_arrivals"]]
        lines += [f"    note: {line}" for line in side.get("notes", [])]
    return lines
