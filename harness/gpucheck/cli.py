"""`python -m harness.gpucheck [--suite A|B|C|D|S ...] [--require-gpu]`, what `make gpu-check` runs.

Exit status: 0 when no check failed (a machine without CUDA skips the GPU checks and still
exits 0), 1 when one failed or errored, 2 with --require-gpu and no CUDA device.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
from pathlib import Path
from typing import Any

from harness.gpucheck.outcome import Check, counts, exit_code, skipped
from harness.gpucheck.report import write_report

REPO = Path(__file__).resolve().parents[2]
REPORTS_DIR = REPO / "reports" / "gpu"  # the committed reports, from a GPU
CPU_REPORTS_DIR = REPO / "outputs" / "gpu-check"  # a CPU run's, ignored by git
SUITES = ("A", "B", "C", "D", "S")
NO_GPU = "no CUDA device: GPU check skipped"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m harness.gpucheck", description=__doc__)
    ap.add_argument(
        "--suite",
        action="append",
        type=str.upper,
        choices=SUITES,
        help="run only this suite (repeatable); default: all",
    )
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
    ap.add_argument(
        "--budget-s",
        type=float,
        default=180.0,
        help="suite C's time budget on a GPU; points past it are skipped rows (default 180)",
    )
    return ap.parse_args(argv)


def skipped_suite(suite: str, names: list[tuple[str, str]]) -> list[Check]:
    return [skipped(suite, name, proves, NO_GPU) for name, proves in names]


def run_suites(
    suites: list[str], cuda: bool, budget_s: float, reports_dir: Path = REPORTS_DIR
) -> list[Check]:
    import torch

    rows: list[Check] = []
    if "A" in suites:
        from harness.gpucheck import suite_a

        if cuda:
            rows += suite_a.run()
        else:
            rows += skipped_suite("A", suite_a.NAMES)
    if "B" in suites:
        from harness.gpucheck import suite_b

        if cuda:
            rows += suite_b.run()
        else:
            rows += skipped_suite("B", suite_b.NAMES)
    if "C" in suites:
        from harness.gpucheck import suite_c

        device = torch.device("cuda", 0) if cuda else torch.device("cpu")
        rows += suite_c.run(device, reduced=not cuda, budget_s=budget_s)
    if "D" in suites:
        from harness.gpucheck import suite_d
        from harness.gpucheck.report import device_slug

        if cuda:
            rows += suite_d.run(reports_dir / device_slug(torch.cuda.get_device_name(0)))
        else:
            rows += skipped_suite("D", suite_d.NAMES)
    if "S" in suites:
        from harness.gpucheck import suite_s
        from harness.gpucheck.report import device_slug

        if cuda:
            name = torch.cuda.get_device_name(0)
            rows += suite_s.run(reports_dir / device_slug(name), name, torch.device("cuda", 0))
        else:
            rows += skipped_suite("S", suite_s.NAMES)
    return rows


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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    cuda = torch.cuda.is_available()
    if args.require_gpu and not cuda:
        print("[gpu-check] --require-gpu: no CUDA device is visible to torch", file=sys.stderr)
        return 2
    suites = sorted(set(args.suite or SUITES))
    if not cuda:
        print("[gpu-check] no CUDA device: GPU checks skipped; suite C runs reduced on CPU")
    reports_dir = args.reports_dir or (REPORTS_DIR if cuda else CPU_REPORTS_DIR)
    rows = run_suites(suites, cuda, args.budget_s, reports_dir)
    paths = write_report(describe(suites, cuda), rows, reports_dir)
    c = counts(rows)
    print(
        f"[gpu-check] {c['pass']} passed, {c['fail']} failed, {c['error']} errors, "
        f"{c['skip']} skipped" + ("" if cuda else " (GPU checks skipped: no CUDA device)")
    )
    for p in paths:
        print(f"[gpu-check] wrote {p}")
    return exit_code(rows)
