"""A sweep's timeline pictures: one per grid point, drawn by `harness.trace.timeline`, and the
index that records which grid point each shows."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from harness.engines.registry import engine_order
from harness.jobdir.grid_point import MATCH_COLUMNS, REPEAT_COLUMN, GridPoint
from harness.jobdir.result import write_json_atomic
from harness.models.shapes import MODEL_SHAPES
from harness.trace.parse import TraceError

TIMELINE_DIR = "timelines"  # <sweep>/timelines/: one picture per grid point
TIMELINE_INDEX = "index.json"  # which grid point each picture shows


def write_timeline_index(sweep_dir: Path | str, pictures: dict[GridPoint, str]) -> Path:
    """Record which grid point each of the sweep's timeline pictures (file names in
    <sweep>/timelines/) shows, so that no reader has to guess it from a name."""
    entries = [{"file": name, "point": point.to_dict()} for point, name in pictures.items()]
    path = Path(sweep_dir) / TIMELINE_DIR / TIMELINE_INDEX
    write_json_atomic(path, {"timelines": entries})
    return path


def sweep_timelines(
    sweep_dir: Path | str, points: Iterable[GridPoint] = ()
) -> dict[str, GridPoint]:
    """The sweep's timeline pictures (file name -> grid point) as its index records them;
    a sweep drawn before the index existed has its pictures found by the names
    `timeline_names` gives `points` (the grid points of its jobs)."""
    path = Path(sweep_dir) / TIMELINE_DIR / TIMELINE_INDEX
    try:
        entries = json.loads(path.read_text())["timelines"]
        return {str(e["file"]): GridPoint.from_dict(e["point"]) for e in entries}
    except (OSError, ValueError, KeyError, TypeError):
        names = timeline_names(points)
        return {name: point for point, name in names.items()}


def timeline_names(points: Iterable[GridPoint]) -> dict[GridPoint, str]:
    """Each grid point's picture name: `llama_tiny_g2_s128_c1.png`, with the setting added
    where two points share model, gpus, seq_len and ckpt_layers."""
    points = list(dict.fromkeys(points))
    stems = Counter(p.file_stem() for p in points)
    return {p: f"{p.file_stem(with_setting=stems[p.file_stem()] > 1)}.png" for p in points}


def table_order(point: GridPoint) -> tuple[object, ...]:
    """The report tables' order: model family and size as harness.models.shapes lists them,
    then gpus, seq-len, checkpointed layers (numbers as numbers), then the setting."""
    models = list(MODEL_SHAPES)
    model = (
        (models.index(point.model), "")
        if point.model in models
        else (len(models), str(point.model))
    )

    def number(v: object) -> float:
        try:
            return float(v)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return float("inf")

    rest = (number(point.gpus), number(point.seq_len), number(point.ckpt_layers))
    return (model, rest, [str(v) for v in point.to_dict().values()])


def draw_sweep_timelines(sweep_dir: Path | str, df: pd.DataFrame) -> list[Path]:
    """One picture per grid point of a sweep, its engines side by side, in <sweep>/timelines/,
    and the index of which point each shows.

    `df` is the sweep's results table (harness.results.table.collect_results); points whose jobs
    have no traces are left out, and a trace that cannot be drawn is reported, not fatal.
    Where jobs ran more than once (`repeats`), each engine's first run is drawn.
    """
    sweep_dir = Path(sweep_dir)
    out_dir = sweep_dir / TIMELINE_DIR
    traced = df[(df["status"] == "ok") & df.get("profile_traces", pd.Series(dtype=object)).notna()]
    jobs: dict[GridPoint, list[tuple[str, str]]] = {}
    # One panel per engine: a point's repeats ran the same job again, so the first run shows.
    repeats = pd.to_numeric(traced.get(REPEAT_COLUMN, pd.Series(0, index=traced.index)))
    first_runs = traced.assign(_r=repeats.fillna(0)).sort_values("_r", kind="stable")
    for _, row in first_runs.iterrows():
        point = GridPoint.of({c: row.get(c) for c in MATCH_COLUMNS})
        engine = str(row["engine"])
        if all(e != engine for e, _ in jobs.get(point, [])):
            jobs.setdefault(point, []).append((engine, str(row["job_dir"])))
    names = timeline_names(sorted(jobs, key=table_order))
    written, drawn = [], {}
    for point, name in names.items():
        from harness.trace.timeline import plot_timeline  # matplotlib: only for a picture

        by_engine = sorted(jobs[point], key=lambda job: (engine_order(job[0]), job[1]))
        job_dirs = [sweep_dir / job_dir for _, job_dir in by_engine]  # yafsdp first
        try:
            written.append(plot_timeline(job_dirs, out_dir / name))
            drawn[point] = name
        except TraceError as e:
            print(f"[harness] timeline {name} not drawn: {e}")
    if drawn:
        write_timeline_index(sweep_dir, drawn)
    return written
