"""python -m harness.trace attribute <trace file | job dir> [--json]

Prints every rank's profiled steps split into causes: a table per step (cause, ms, % of the
step), or with --json a list of {rank, step, start_us, step_s, causes, by_unit, host_ops}.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.markdown import markdown_table
from harness.trace.diagnose import causes as C
from harness.trace.diagnose.attribute import StepAttribution
from harness.trace.jobs import attribute_job, attribute_trace
from harness.trace.parse import TraceError


def step_table(s: StepAttribution) -> str:
    """One step's causes as a markdown table; causes of zero time are left out."""
    rows = []
    for cause in C.ORDER:
        seconds = s.causes.get(cause, 0.0)
        if abs(seconds) < 5e-10:
            continue
        pct = 100.0 * seconds / s.step_s if s.step_s > 0 else 0.0
        rows.append([cause, f"{seconds * 1e3:.3f}", f"{pct:.1f}", C.DESCRIPTIONS.get(cause, "")])
    table = markdown_table(["cause", "ms", "% of step", "what"], rows)
    lines = [f"rank {s.rank}, step {s.step}: {s.step_s * 1e3:.3f} ms", "", table]
    if s.host_ops:
        ops = ", ".join(f"{name} {sec * 1e3:.3f} ms" for name, sec in s.host_ops.items())
        lines += ["", f"host busy while the device waited: {ops}"]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    target = Path(args.target)
    if not target.exists():
        raise TraceError(f"{target}: no such trace file or job directory")
    steps = attribute_job(target) if target.is_dir() else attribute_trace(target)
    if args.json:
        print(json.dumps([s.to_dict() for s in steps], indent=2))
    else:
        print("\n\n".join(step_table(s) for s in steps))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    a = sub.add_parser("attribute", help="each rank's steps split into causes that sum to them")
    a.add_argument("target", help="a trace file (.json/.json.gz) or a job directory")
    a.add_argument("--json", action="store_true", help="print the steps as JSON")
    a.set_defaults(func=run)
