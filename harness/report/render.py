"""Build `report.md` (and its figures) from one or more sweep directories.

The only module of the report that touches files: it reads the sweeps, draws and copies
the pictures, and writes the report; `sections` turns what it found into markdown.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from harness.jobdir.grid_point import MATCH_COLUMNS, GridPoint, Setting
from harness.report import charts
from harness.report.jobs import ReportJobs
from harness.report.matching import sort_jobs, value, with_variants
from harness.report.measured import Measured, measured_comparisons
from harness.report.picture_links import (
    Pictures,
    Timeline,
    job_timeline_caption,
    sweep_timeline_caption,
)
from harness.report.sections import render_markdown
from harness.results.table import collect_results, to_csv
from harness.results.timelines import TIMELINE_DIR, sweep_timelines
from harness.sweep.running import describe_running
from harness.trace.jobs import RECORD

REPORT_FILE = "report.md"


def load_sweeps(sweep_dirs: Sequence[Path]) -> tuple[pd.DataFrame, list[str]]:
    """All jobs of all sweeps, each row tagged with its sweep and a printable job label."""
    frames, problems = [], []
    several = len(sweep_dirs) > 1
    for sweep in sweep_dirs:
        found: list[str] = []
        df = collect_results(sweep, problems=found, record=RECORD)
        problems += [f"{sweep}: {p}" if several else p for p in found]
        df["sweep"] = str(sweep)
        df["job_label"] = [f"{Path(sweep).name}/{j}" if several else j for j in df["job_dir"]]
        frames.append(df)
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame(columns=["job_dir", "status", "engine", "job_label", "sweep"]), problems
    return with_variants(pd.concat(frames, ignore_index=True)), problems


def build_report(sweep_dirs: list[Path], out_dir: Path) -> Path:
    """Write `<out_dir>/report.md`, its figures and a combined results.csv; return report.md."""
    sweep_dirs = [Path(s) for s in sweep_dirs]
    if not sweep_dirs:
        raise ValueError("build_report needs at least one sweep directory")
    out_dir = Path(out_dir)
    df, problems = load_sweeps(sweep_dirs)
    for stale in ("figures", "timelines"):  # pictures of an earlier rendering must not linger
        for png in (out_dir / stale).glob("*.png"):
            png.unlink()
    (out_dir / "figures").mkdir(parents=True, exist_ok=True)
    report = ReportJobs(df, sweep_dirs, problems, running=describe_running(sweep_dirs))
    pictures = Pictures(
        speedup=_draw_speedups(report, out_dir),
        memory=_draw_memory(report, out_dir),
        timelines=_copy_timelines(report, out_dir),
    )
    text = render_markdown(report, pictures, _measure(report))
    to_csv(df.drop(columns=["job_label"], errors="ignore"), out_dir / "results.csv")
    path = out_dir / REPORT_FILE
    path.write_text(text)
    return path


def _measure(report: ReportJobs) -> Measured:
    """Every speedup row's jobs compared on their traces (`harness.trace why`)."""
    found: Measured = {}
    for baseline in report.baselines():
        for _, rows in report.speedup_tables(baseline):
            found.update(measured_comparisons(rows))
    return found


def _draw_speedups(report: ReportJobs, out_dir: Path) -> dict[tuple[str, Setting], str]:
    links = {}
    several = len(report.settings) > 1
    for baseline in report.baselines():
        for setting, rows in report.speedup_tables(baseline):
            stem = f"speedup_{baseline}"
            if several:
                stem += "_" + re.sub(r"[^A-Za-z0-9]+", "_", setting.label()).strip("_")
            png = charts.speedup_figure(rows, baseline, out_dir / "figures" / f"{stem}.png")
            if png:
                links[(baseline, setting)] = png.relative_to(out_dir).as_posix()
    return links


def _draw_memory(report: ReportJobs, out_dir: Path) -> str | None:
    if report.jobs.empty:
        return None
    png = charts.memory_figure(report.jobs, out_dir / "figures" / "peak_memory.png")
    return png.relative_to(out_dir).as_posix() if png else None


def _picture_order(point: GridPoint | None, name: str) -> tuple[object, ...]:
    """A sweep's pictures in the tables' order; pictures of no known point last, by name."""
    from harness.results.timelines import table_order

    return (0, table_order(point), name) if point is not None else (1, (), name)


def _copy_timelines(report: ReportJobs, out_dir: Path) -> list[Timeline]:
    """Every job's and sweep's timeline pictures, copied beside the report; a sweep's are
    captioned by the grid point its timeline index says each shows."""
    found: list[tuple[str, Path, GridPoint | None]] = []
    for _, row in sort_jobs(report.jobs).iterrows():
        job = Path(row["sweep"]) / row["job_dir"]
        pngs = sorted({*job.glob("*.png"), *job.glob("traces/*.png")})
        found += [(job_timeline_caption(row, p.name), p, None) for p in pngs]
    all_jobs = report.all_jobs
    for sweep in report.sweeps:
        jobs = all_jobs[all_jobs["sweep"] == str(sweep)] if not all_jobs.empty else all_jobs
        points = [GridPoint.of({c: value(r, c) for c in MATCH_COLUMNS}) for _, r in jobs.iterrows()]
        shown = sweep_timelines(sweep, points)
        drawn = (Path(sweep) / TIMELINE_DIR).glob("*.png")
        for png in sorted(drawn, key=lambda p: _picture_order(shown.get(p.name), p.name)):
            point = shown.get(png.name)
            caption = sweep_timeline_caption(
                point, png.name, several_settings=report.several_settings
            )
            found.append((caption, png, point))
    if not found:
        return []
    dest_dir = out_dir / "timelines"
    dest_dir.mkdir(parents=True, exist_ok=True)
    copied = []
    for i, (caption, src, point) in enumerate(found):
        dest = dest_dir / f"{i:03d}_{re.sub(r'[^A-Za-z0-9._-]+', '_', src.name)}"
        shutil.copyfile(src, dest)
        copied.append(Timeline(caption, src.name, dest.relative_to(out_dir).as_posix(), point))
    return copied
