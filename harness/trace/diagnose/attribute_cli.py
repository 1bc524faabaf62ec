"""python -m harness.trace attribute <trace file | job dir> [--rank R] [--step N] [--each] [--json]

Prints the profiled steps split into causes: by default one table, the mean over every rank
and step (256 ranks x 2 steps would otherwise be 512 tables); `--rank` and `--step` narrow
it, `--each` prints a table per step instead. `--json` lists the chosen steps as
{rank, step, start_us, step_s, causes, by_unit, host_ops}.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from harness.markdown import markdown_table
from harness.models.unit_names import shown_by_unit
from harness.trace.diagnose import causes as C
from harness.trace.diagnose.attribute import StepAttribution
from harness.trace.jobs import attribute_job, attribute_trace, job_units_of
from harness.trace.parse import TraceError


def mean_step(steps: list[StepAttribution]) -> StepAttribution:
    """The mean of `steps`, cause by cause (the causes of each sum to its step, so the means
    sum to the mean step); rank and step are those of the first."""
    n = len(steps)
    total: dict[str, float] = defaultdict(float)
    units: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    ops: dict[str, float] = defaultdict(float)
    for s in steps:
        for cause, sec in s.causes.items():
            total[cause] += sec / n
        for cause, per_unit in s.by_unit.items():
            for unit, sec in per_unit.items():
                units[cause][unit] += sec / n
        for name, sec in s.host_ops.items():
            ops[name] += sec / n
    return StepAttribution(
        rank=steps[0].rank,
        step=steps[0].step,
        start_us=steps[0].start_us,
        step_s=sum(s.step_s for s in steps) / n,
        causes=dict(total),
        by_unit={c: dict(u) for c, u in units.items()},
        host_ops=dict(sorted(ops.items(), key=lambda kv: -kv[1])),
    )


def _span(values: list[int]) -> str:
    found = sorted(set(values))
    if len(found) > 2 and found == list(range(found[0], found[-1] + 1)):
        return f"{found[0]}-{found[-1]}"
    return ", ".join(map(str, found))


def mean_title(steps: list[StepAttribution]) -> str:
    """`mean of 4 steps (ranks 0, 1; steps 1, 2)`."""
    ranks, numbers = [s.rank for s in steps], [s.step for s in steps]
    return (
        f"mean of {len(steps)} steps (rank{'s' if len(set(ranks)) > 1 else ''} {_span(ranks)}; "
        f"step{'s' if len(set(numbers)) > 1 else ''} {_span(numbers)})"
    )


def step_table(s: StepAttribution, title: str | None = None) -> str:
    """One step's causes as a markdown table; causes of zero time are left out."""
    rows = []
    for cause in C.ORDER:
        seconds = s.causes.get(cause, 0.0)
        if abs(seconds) < 5e-10:
            continue
        pct = 100.0 * seconds / s.step_s if s.step_s > 0 else 0.0
        rows.append([cause, f"{seconds * 1e3:.3f}", f"{pct:.1f}", C.DESCRIPTIONS.get(cause, "")])
    table = markdown_table(["cause", "ms", "% of step", "what"], rows)
    lines = [f"{title or f'rank {s.rank}, step {s.step}'}: {s.step_s * 1e3:.3f} ms", "", table]
    if s.host_ops:
        ops = ", ".join(f"{name} {sec * 1e3:.3f} ms" for name, sec in s.host_ops.items())
        lines += ["", f"host busy while the device waited: {ops}"]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    target = Path(args.target)
    if not target.exists():
        raise TraceError(f"{target}: no such trace file or job directory")
    found = attribute_job(target) if target.is_dir() else attribute_trace(target)
    units = job_units_of(target) if target.is_dir() else None  # an old trace's unit<N>
    found = [replace(s, by_unit=shown_by_unit(s.by_unit, units)) for s in found]
    steps = [
        s
        for s in found
        if (args.rank is None or s.rank == args.rank) and (args.step is None or s.step == args.step)
    ]
    if not steps:
        have = f"ranks {_span([s.rank for s in found])}, steps {_span([s.step for s in found])}"
        raise TraceError(f"{target}: no profiled step with --rank {args.rank} --step "
                         f"{args.step} (the traces hold {have})")  # fmt: skip
    if args.json:
        print(json.dumps([s.to_dict() for s in steps], indent=2))
    elif args.each or len(steps) == 1:
        print("\n\n".join(step_table(s) for s in steps))
    else:
        print(step_table(mean_step(steps), mean_title(steps)))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    a = sub.add_parser("attribute", help="each rank's steps split into causes that sum to them")
    a.add_argument("target", help="a trace file (.json/.json.gz) or a job directory")
    a.add_argument("--rank", type=int, default=None, help="this rank's steps only")
    a.add_argument("--step", type=int, default=None, help="this step (on every rank) only")
    a.add_argument("--each", action="store_true", help="a table per step, not their mean")
    a.add_argument("--json", action="store_true", help="print the chosen steps as JSON")
    a.set_defaults(func=run)
