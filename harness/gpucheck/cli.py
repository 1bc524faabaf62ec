"""`python -m harness.gpucheck [--suite A|B|C|D|S ...] [--deadline-s S] [--require-gpu]`, what
`make gpu-check` runs.

The suites run in the order asked (default A, B, D, S, C: the most valuable first); each
prints its estimated GPU minutes before it starts, and the report is written after every
row, so a run cut short still leaves one. Suite C is elastic: it gets what the deadline
leaves. Exit status: 0 when no check failed (a machine without CUDA skips the GPU checks
and still exits 0), 1 when one failed or errored, 2 with --require-gpu and no CUDA device.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from pathlib import Path
from typing import Any

from harness.gpucheck.check_rows import Check, counts, exit_code, skipped
from harness.gpucheck.report import device_slug, write_report
from harness.gpucheck.schedule import DEFAULT_DEADLINE_S, ELASTIC, ORDER, Deadline, Work, order

REPO = Path(__file__).resolve().parents[2]
REPORTS_DIR = REPO / "reports" / "gpu"  # the committed reports, from a GPU
CPU_REPORTS_DIR = REPO / "outputs" / "gpu-check"  # a CPU run's, ignored by git
SUITES = ORDER
NO_GPU = "no CUDA device: GPU check skipped"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m harness.gpucheck", description=__doc__)
    ap.add_argument("--suite", action="append", type=str.upper, choices=SUITES,
                    help=f"run this suite (repeatable, run in the order given); default: "
                    f"{', '.join(ORDER)}")  # fmt: skip
    ap.add_argument(
        "--require-gpu", action="store_true", help="fail (exit 2) when no CUDA device is present"
    )
    ap.add_argument(
        "--reports-dir",
        type=Path,
        default=None,
        help="where <device-slug>/gpu-check.md goes (default: reports/gpu on a GPU, "
        "outputs/gpu-check on a CPU, which git ignores); also $OUT if set",
    )
    ap.add_argument("--deadline-s", type=float, default=DEFAULT_DEADLINE_S,
                    help="wall-clock limit of the whole run; a suite that would start after "
                    "it is skipped rows, suite C gets what is left "
                    f"(default {DEFAULT_DEADLINE_S:g})")  # fmt: skip
    ap.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="at most this much for suite C (default: what the deadline leaves)",
    )
    return ap.parse_args(argv)


class Recorder:
    """The run's rows; the report is rewritten after each one."""

    def __init__(self, meta: dict[str, Any], reports_dir: Path) -> None:
        self.meta, self.reports_dir = meta, reports_dir
        self.rows: list[Check] = []
        self.paths: list[Path] = []

    def add(self, row: Check) -> None:
        self.rows.append(row)
        self.paths = write_report(self.meta, self.rows, self.reports_dir)

    def suite_done(self, suite: str, seconds: float) -> None:
        self.meta["suites"][suite]["seconds"] = round(seconds, 1)
        if self.rows:
            self.paths = write_report(self.meta, self.rows, self.reports_dir)


def estimate(suite: str, cuda: bool, left_s: float) -> str:
    """What the suite is expected to take on the GPU, from its work (printed on a CPU too,
    where the GPU suites are skipped: the plan of a GPU run)."""
    if suite == ELASTIC:
        where = "" if cuda else " (reduced, on CPU)"
        return f"elastic: up to the {max(0.0, left_s) / 60:.1f} min the deadline leaves{where}"
    from harness.gpucheck import suite_a, suite_b, suite_d, suite_s

    units = {"A": lambda: suite_a.WORK, "B": suite_b.work, "D": lambda: suite_d.WORK,
             "S": lambda: suite_s.WORK}[suite]()  # fmt: skip
    return Work(units).describe() + ("" if cuda else "; skipped here: no CUDA device")


def run_suite(suite: str, cuda: bool, args: argparse.Namespace, deadline: Deadline,
              reports_dir: Path, rec: Recorder) -> None:  # fmt: skip
    """One suite's rows, each recorded as it is done."""
    import torch

    left_s = deadline.left()

    if suite == "A":
        from harness.gpucheck import suite_a

        rows = suite_a.run(rec.add) if cuda else skipped_suite("A", suite_a.NAMES)
    elif suite == "B":
        from harness.gpucheck import suite_b

        rows = suite_b.run(rec.add, deadline.left) if cuda else suite_b.skipped_rows(NO_GPU)
    elif suite == "C":
        from harness.gpucheck import suite_c

        device = torch.device("cuda", 0) if cuda else torch.device("cpu")
        budget = left_s if args.budget_s is None else min(args.budget_s, left_s)
        suite_c.run(device, reduced=not cuda, budget_s=max(0.0, budget), on_row=rec.add)
        return
    elif suite == "S":
        from harness.gpucheck import suite_s

        if cuda:
            name = torch.cuda.get_device_name(0)
            suite_s.run(reports_dir / device_slug(name), name, torch.device("cuda", 0), rec.add)
            return
        rows = skipped_suite("S", suite_s.NAMES)
    else:
        from harness.gpucheck import suite_d

        if cuda:
            suite_d.run(reports_dir / device_slug(torch.cuda.get_device_name(0)), rec.add)
            return
        rows = skipped_suite("D", suite_d.NAMES)
    if not cuda:  # the skipped rows were made, not run: record them
        for row in rows:
            rec.add(row)


def suite_names(suite: str) -> list[tuple[str, str]]:
    """The rows of a suite that is not elastic (C's rows are skipped by C itself)."""
    from harness.gpucheck import suite_a, suite_b, suite_d, suite_s

    return {"A": suite_a.NAMES, "B": suite_b.NAMES, "D": suite_d.NAMES, "S": suite_s.NAMES}[suite]


def skipped_suite(suite: str, names: list[tuple[str, str]], why: str = NO_GPU) -> list[Check]:
    return [skipped(suite, name, proves, why) for name, proves in names]


def run_suites(suites: list[str], cuda: bool, args: argparse.Namespace, reports_dir: Path,
               rec: Recorder) -> None:  # fmt: skip
    deadline = Deadline(args.deadline_s)
    for suite in suites:
        left = deadline.left()
        if suite != ELASTIC and deadline.passed():
            why = f"the run's deadline ({args.deadline_s:g} s) passed before this suite"
            print(f"[gpu-check] suite {suite}: skipped: {why}", flush=True)
            rec.meta["suites"][suite]["ran"] = "skipped: deadline"
            for row in skipped_suite(suite, suite_names(suite), why):
                rec.add(row)
            continue
        print(f"[gpu-check] suite {suite}: {estimate(suite, cuda, left)}", flush=True)
        start = time.monotonic()
        run_suite(suite, cuda, args, deadline, reports_dir, rec)
        rec.suite_done(suite, time.monotonic() - start)


def _how(suite: str, cuda: bool) -> str:
    if cuda:
        return "on the GPU"
    return "reduced, on CPU" if suite == "C" else "skipped: no CUDA device"


def describe(suites: list[str], cuda: bool) -> dict[str, Any]:
    import torch

    from harness.rank.environment import git_revision

    revision = git_revision()
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return {
        "cuda_device": torch.cuda.get_device_name(0) if cuda else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "python": platform.python_version(),
        "git_revision": revision,
        "suites": {
            s: {"when": when, "git_revision": revision, "ran": _how(s, cuda)} for s in suites
        },
    }


def summary(rows: list[Check], cuda: bool) -> list[str]:
    """The closing lines: the counts, and which rows were skipped and why."""
    c = counts(rows)
    lines = [
        f"[gpu-check] {c['pass']} passed, {c['fail']} failed, {c['error']} errors, "
        f"{c['skip']} skipped" + ("" if cuda else " (GPU checks skipped: no CUDA device)")
    ]
    reasons: dict[str, list[str]] = {}
    for r in rows:
        if r.result == "skip":
            reasons.setdefault(r.detail, []).append(f"{r.suite}{r.check}")
    lines += [
        f"[gpu-check] skipped {len(which)} ({why}): {', '.join(which)}"
        for why, which in reasons.items()
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    cuda = torch.cuda.is_available()
    if args.require_gpu and not cuda:
        print("[gpu-check] --require-gpu: no CUDA device is visible to torch", file=sys.stderr)
        return 2
    suites = order(args.suite)
    if not cuda:
        print("[gpu-check] no CUDA device: GPU checks skipped; suite C runs reduced on CPU")
    reports_dir = args.reports_dir or (REPORTS_DIR if cuda else CPU_REPORTS_DIR)
    rec = Recorder(describe(suites, cuda), reports_dir)
    run_suites(suites, cuda, args, reports_dir, rec)
    for line in summary(rec.rows, cuda):
        print(line)
    for p in rec.paths:
        print(f"[gpu-check] wrote {p}")
    return exit_code(rec.rows)
