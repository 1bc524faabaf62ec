"""python -m harness.trace path <job dir> [--json]

Prints every rank's profiled steps' critical path
(`harness.trace.diagnose.critical_path`): whether it covers the step, then its largest
segments from the step's end back. With --json, a list of
{rank, step, step_s, path_s, agrees, verdict, segments}.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from harness.trace.diagnose.critical_path import path_lines
from harness.trace.jobs import job_critical_paths


def run(args: argparse.Namespace) -> int:
    paths = job_critical_paths(args.job_dir)
    if args.json:
        rows: list[dict[str, Any]] = [
            {**asdict(p), "agrees": p.agrees, "verdict": p.verdict()} for p in paths
        ]
        print(json.dumps(rows, indent=2))
        return 0
    for p in paths:
        print("\n".join(path_lines(p)))
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("path", help="each step's critical path (GPU traces), and its length")
    p.add_argument("job_dir", help="a job directory with traces/rank<r>.json[.gz]")
    p.add_argument("--json", action="store_true", help="print the paths as JSON")
    p.set_defaults(func=run)
