"""`python -m harness.report` / `yafsdp-bench-report`: render a report from sweep dirs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.report.render import build_report
from harness.results.table import sweep_dir_problem


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="yafsdp-bench-report",
        description="Write report.md and figures from one or more sweep directories "
        "(Hydra multirun dirs holding <job>/result.json).",
    )
    parser.add_argument("sweep_dirs", type=Path, nargs="+", metavar="SWEEP_DIR")
    parser.add_argument(
        "-o",
        "--out",
        type=Path,
        default=None,
        help="output directory (default: <first sweep dir>/report)",
    )
    args = parser.parse_args(argv)
    refused = [p for p in (sweep_dir_problem(s, writing=False) for s in args.sweep_dirs) if p]
    if refused:
        parser.error("; ".join(refused))
    out_dir = args.out if args.out is not None else args.sweep_dirs[0] / "report"
    try:
        path = build_report(args.sweep_dirs, out_dir)
    except OSError as e:  # a read-only sweep directory, a full disk
        where = e.filename or out_dir
        hint = "" if args.out is not None else " (by default it goes into the sweep directory)"
        print(
            f"error: cannot write the report to {out_dir}{hint}: {e.strerror} ({where}); "
            "choose a writable output directory with -o <dir>",
            file=sys.stderr,
        )
        return 2
    print(f"report written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
