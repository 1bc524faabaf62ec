"""python -m harness.trace summarize <trace file | job dir> [--units] [--json]
python -m harness.trace timeline <job dir> [<job dir> ...] [-o out.png] [--rank R] [--step N]
python -m harness.trace attribute <trace file | job dir> [--json]
python -m harness.trace why <job A> <job B> [--rank R] [--json]
python -m harness.trace path <job dir> [--json]
python -m harness.trace merge <job dir> [-o merged.json.gz]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path

import pandas as pd

from harness.models.unit_names import shown
from harness.trace.diagnose import attribute_cli, path_cli
from harness.trace.jobs import job_units_of
from harness.trace.parse import TraceError
from harness.trace.summary import summarize_job, summarize_trace
from harness.trace.timeline import plot_timeline


def _table(rows: list[dict]) -> str:
    """Markdown table; *_s columns shown in milliseconds."""
    df = pd.DataFrame(rows)
    df.columns = [c.removesuffix("_s") + "_ms" if c.endswith("_s") else c for c in df.columns]
    for c in df.columns:
        scale = 1e3 if c.endswith("_ms") else 1.0
        if df[c].dtype.kind == "f" or c.endswith("_ms"):
            df[c] = [("n/a" if pd.isna(v) else f"{v * scale:.3f}") for v in df[c]]
    return df.to_markdown(index=False, disable_numparse=True)


def summarize(args: argparse.Namespace) -> int:
    target = Path(args.target)
    result = summarize_job(target) if target.is_dir() else summarize_trace(target)
    for warning in result.get("warnings", []):
        print(f"warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    s = result["summary"]
    pct = "n/a (no communication)" if s["overlap_pct"] is None else f"{s['overlap_pct']:.1f}%"
    print(f"{target}: {result['kind']} trace(s)")
    print(_table(result["steps"]))
    print(
        f"\noverlap {pct}; per step: compute {s['compute_s_per_step'] * 1e3:.3f} ms, "
        f"comm {s['comm_s_per_step'] * 1e3:.3f} ms, "
        f"exposed comm {s['exposed_comm_s_per_step'] * 1e3:.3f} ms, "
        f"idle {s['idle_s_per_step'] * 1e3:.3f} ms"
    )
    if args.units and result["units"]:
        units = job_units_of(target) if target.is_dir() else None  # an old trace's unit<N>
        rows = [{**row, "unit": shown(str(row["unit"]), units)} for row in result["units"]]
        print("\n" + _table(rows))
    return 0


def timeline(args: argparse.Namespace) -> int:
    """Jobs of one grid point only (as `why`), drawn to -o, else to a writable place it names."""
    from harness.trace.diagnose.why import WhyError
    from harness.trace.jobs import check_same_point

    dirs = [Path(d) for d in args.job_dirs]
    for other in dirs[1:]:
        try:
            check_same_point(dirs[0], other)
        except WhyError as e:
            raise TraceError(str(e)) from e
    out = Path(args.output) if args.output else default_picture(dirs)
    try:
        written = plot_timeline(dirs, out, rank=args.rank, step=args.step)
    except OSError as e:
        raise TraceError(
            f"cannot write the timeline to {out} ({e.strerror}); choose a writable file "
            "with -o <file>.png"
        ) from e
    step = "the first profiled step" if args.step is None else f"step {args.step}"
    # the path last, alone as the line's last word: scripts read it there
    print(f"wrote the timeline of rank {args.rank}, {step}, {len(dirs)} job(s): "
          f"{Path(written).resolve()}")  # fmt: skip
    return 0


def merge(args: argparse.Namespace) -> int:
    from harness.trace.rank_files import merge_job

    path, ranks, events = merge_job(args.job_dir, args.output)
    print(f"wrote {Path(path).resolve()} ({ranks} ranks, {events} events, each rank its own "
          "process): open it at https://ui.perfetto.dev")  # fmt: skip
    return 0


def default_picture(job_dirs: list[Path]) -> Path:
    """One job's picture beside its result (`<job>/timeline.png`), never among the profiler's
    traces; several jobs', or a job that cannot be written, in the current directory, else
    in the temporary one."""
    if len(job_dirs) == 1 and _writable(job_dirs[0]):
        return job_dirs[0] / "timeline.png"
    names = "_vs_".join(re.sub(r"[^A-Za-z0-9._=-]+", "_", d.resolve().name) for d in job_dirs)
    name = f"timeline_{names[:150]}.png"
    here = Path.cwd()
    return (here if _writable(here) else Path(tempfile.gettempdir())) / name


def _writable(directory: Path) -> bool:
    """Whether a file can be made in `directory` (tried: root passes every access check,
    and a read-only mount fails only on the write)."""
    try:
        with tempfile.TemporaryFile(dir=directory):
            return True
    except OSError:
        return False


def why(args: argparse.Namespace) -> int:
    from harness.trace.diagnose.why import WhyError, why_lines
    from harness.trace.jobs import why as compare_jobs

    try:
        found = compare_jobs(args.job_a, args.job_b, rank=args.rank)
    except WhyError as e:
        raise TraceError(str(e)) from e
    print(json.dumps(found, indent=2) if args.json else "\n".join(why_lines(found)))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.trace", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("summarize", help="per-step overlap table of a trace or a job")
    s.add_argument("target", help="a trace file (.json/.json.gz) or a job directory")
    s.add_argument("--units", action="store_true", help="also print per-annotation rows")
    s.add_argument("--json", action="store_true", help="print the full summary as JSON")
    s.set_defaults(func=summarize)
    t = sub.add_parser("timeline", help="PNG of one step, engines side by side")
    t.add_argument("job_dirs", nargs="+")
    t.add_argument(
        "-o",
        "--output",
        help="PNG path (default: <job>/timeline.png for one writable job, else "
        "./timeline_<jobs>.png); jobs must be at one grid point, as for `why`",
    )
    t.add_argument("--rank", type=int, default=0)
    t.add_argument("--step", type=int, default=None)
    t.set_defaults(func=timeline)
    m = sub.add_parser("merge", help="every rank's trace in one Perfetto-ready file")
    m.add_argument("job_dir")
    m.add_argument("-o", "--output", help="default <job dir>/traces/merged.json.gz")
    m.set_defaults(func=merge)
    attribute_cli.add_parser(sub)
    path_cli.add_parser(sub)
    w = sub.add_parser("why", help="B's step against A's, cause by cause, from their traces")
    w.add_argument("job_a", help="a job directory (result.json and traces/)")
    w.add_argument("job_b", help="a job directory at the same grid point")
    w.add_argument(
        "--rank",
        type=int,
        default=None,
        help="read every step on this rank (default: each step's slowest rank)",
    )
    w.add_argument("--json", action="store_true", help="print the comparison as JSON")
    w.set_defaults(func=why)
    args = p.parse_args(argv)
    try:
        return args.func(args)
    except TraceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `... | head`: the reader has what it wanted
        _quiet_closed_stdout()
        return 0


def _quiet_closed_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush into the closed pipe
    raises nothing (the recipe of Python's signal module documentation)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
