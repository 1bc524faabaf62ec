"""Aggregate a sweep's job directories into one table (`results.csv`), without torch.

One row per job: grid coordinates, engine label, status and error, every metric, the
overlap summary of its traces, the environment, the job directory, and the whole resolved
config as `config.<field>` columns (`config.engine.label`, ...). In process a cell keeps
what result.json holds (a loss curve is a list, the memory breakdown a dict); only the CSV
export turns lists and dicts into JSON text, and `read_results_csv` turns them back.
Trace summaries are computed here from the trace files (cached beside each trace, see
harness.trace.cache), not taken from result.json, so an analysis fix reaches old sweeps; a
job whose traces are gone keeps the summary its result.json may hold. A result.json that
cannot be trusted is not a row: it goes to `problems`, so the report can say which file
was skipped and why.

    python -m harness.results <sweep dir>     # (re)builds <sweep dir>/results.csv
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from harness.jobdir.grid_point import MATCH_COLUMNS, POINT_COLUMNS, REPEAT_COLUMN, SETTING_COLUMNS
from harness.jobdir.paths import RESULT_FILE
from harness.jobdir.prediction import Prediction, read_prediction
from harness.jobdir.recorded_config import engine_of, recorded_config
from harness.jobdir.result import (
    SCALAR_KINDS,
    CorruptResultError,
    Metrics,
    Profile,
    Result,
    read_result,
    typed_fields,
)
from harness.trace.cache import JobRecord, job_profiles
from harness.trace.summary import find_traces

log = logging.getLogger(__name__)

RESULTS_CSV = "results.csv"

CONFIG_COLUMNS = [*MATCH_COLUMNS, REPEAT_COLUMN, "warmup_steps", "steps", "device"]
ENV_COLUMNS = [
    "torch",
    "cuda",
    "nccl",
    "backend",
    "device_name",
    "device_count",
    "world_size",
    "host",
    "git_revision",
    "threads_per_rank",
]
# Metrics in the order Metrics declares them: scalars first, then the rest (loss curves,
# step times, the memory breakdown), which the CSV holds as JSON text.
METRIC_COLUMNS = [f.name for f in typed_fields(Metrics) if f.metadata["kind"] in SCALAR_KINDS]
JSON_METRICS = [f.name for f in typed_fields(Metrics) if f.metadata["kind"] not in SCALAR_KINDS]
# The engine's effective settings (result.json `engine_settings`), one JSON cell per job.
ENGINE_SETTINGS = "engine_settings"
PROFILE_PREFIX = "profile_"
CONFIG_PREFIX = "config."
LEAD_COLUMNS = [
    "job_dir", *POINT_COLUMNS, "engine", REPEAT_COLUMN, "engine_name", "status", "error"
]  # fmt: skip


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _row(
    result: Result,
    job_dir: str,
    profile: dict[str, Any] | None = None,
    prediction: Prediction | None = None,
) -> dict[str, Any]:
    engine = engine_of(result)
    row: dict[str, Any] = {
        "job_dir": job_dir,
        "engine": engine.get("label") or engine.get("name"),
        "engine_name": engine.get("name"),
        "status": result.status,
        "error": result.error or "",
        **{k: v for k, v in result.timing().items() if v is not None},
    }
    recorded = recorded_config(result)
    for key in CONFIG_COLUMNS:
        row[key] = recorded.get(key)
    for key, value in recorded.items():
        row[CONFIG_PREFIX + key] = value

    row.update(result.metrics.to_dict())
    if prediction is not None:  # the job's own record; older jobs: result.json's `predicted`
        row["predicted"] = prediction.as_metric()
    losses = result.metrics.losses or []
    row["final_loss"] = losses[-1] if losses else math.nan
    row.setdefault("losses", losses)

    traced = Profile.from_dict(profile) if profile else (result.profile or Profile())
    for key, value in (traced.summary or {}).items():
        if _is_scalar(value):
            row[PROFILE_PREFIX + key] = value
    if traced.traces:
        row[PROFILE_PREFIX + "traces"] = traced.traces
    if traced.error:
        row[PROFILE_PREFIX + "error"] = traced.error
    if traced.warnings:
        row[PROFILE_PREFIX + "warnings"] = "; ".join(traced.warnings)

    for key, value in result.env.items():
        if _is_scalar(value):
            row[key] = value
    if result.engine_settings is not None:
        row[ENGINE_SETTINGS] = result.engine_settings
    return row


def _ordered_columns(columns: list[str]) -> list[str]:
    first = [
        *LEAD_COLUMNS,
        *SETTING_COLUMNS,
        "warmup_steps",
        "steps",
        "device",
        *METRIC_COLUMNS,
        "final_loss",
    ]
    present = set(columns)
    head = [c for c in first if c in present]
    profile = sorted(c for c in present if c.startswith(PROFILE_PREFIX))
    env = [c for c in ENV_COLUMNS if c in present]
    config = sorted(c for c in present if c.startswith(CONFIG_PREFIX))
    tail_json = [c for c in [*JSON_METRICS, ENGINE_SETTINGS] if c in present]
    placed = set(head) | set(profile) | set(env) | set(config) | set(tail_json)
    rest = sorted(present - placed)
    return head + rest + profile + env + config + tail_json


def find_result_files(sweep_dir: Path) -> list[Path]:
    """Every job's result.json under the sweep (job dirs may be nested), in a stable order."""
    return sorted(Path(sweep_dir).rglob(RESULT_FILE))


def collect_results(
    sweep_dir: Path,
    *,
    problems: list[str] | None = None,
    workers: int | None = None,
    record: JobRecord | None = None,
) -> pd.DataFrame:
    """One row per job found under `sweep_dir`; traces summarised by `workers` processes,
    which also compute and cache each job's `record` (the report's traced record).

    A result.json that cannot be read is skipped and described in `problems` (when given)
    and in `df.attrs["problems"]`, as is a Hydra job directory without one; the statuses
    stay the schema's five.
    """
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise FileNotFoundError(f"sweep directory {sweep_dir} does not exist")
    found: list[str] = []
    rows = []
    results = []
    for path in find_result_files(sweep_dir):
        name = path.relative_to(sweep_dir).as_posix()
        try:
            results.append((path.parent, read_result(path)))
        except CorruptResultError as e:
            reason = str(e).removeprefix(f"{path}: ")
            found.append(f"corrupt result file {name}: {reason}")
    traced = [d for d, _ in results if find_traces(d)]
    profiles = job_profiles(traced, workers=workers, record=record)
    for job_path, result in results:
        job_dir = job_path.relative_to(sweep_dir).as_posix()
        name = f"{job_dir}/{RESULT_FILE}"
        try:
            rows.append(_row(result, job_dir, profiles.get(job_path), read_prediction(job_path)))
        except CorruptResultError as e:
            found.append(f"unusable result file {name}: {e}")
        except (AttributeError, TypeError, IndexError) as e:  # valid JSON, odd shape inside
            found.append(f"corrupt result file {name}: unexpected layout ({e})")
    for hydra_dir in sorted(sweep_dir.rglob(".hydra")):
        # Hydra made the job directory, but the job never wrote its result (still running,
        # or its submitter died): say so rather than letting the job vanish from the tables.
        if not (hydra_dir.parent / RESULT_FILE).exists():
            job_dir = hydra_dir.parent.relative_to(sweep_dir).as_posix()
            found.append(f"no result file in job directory {job_dir} (never finished?)")
    for message in found:
        log.warning("%s: %s", sweep_dir, message)
    df = pd.DataFrame(rows)
    for column in df.columns.intersection(JSON_METRICS):  # None (recorded null), not NaN
        df[column] = pd.Series([r.get(column, math.nan) for r in rows], dtype=object)
    if rows:
        df = df[_ordered_columns(list(df.columns))]
    else:
        df = pd.DataFrame(columns=LEAD_COLUMNS)
    df.attrs["problems"] = found
    if problems is not None:
        problems.extend(found)
    return df


def sweep_dir_problem(path: Path, *, writing: bool = True) -> str | None:
    """Why `path` cannot be read (and, `writing`, written) as a sweep directory; None if it can.

    A sweep directory holds job results (`<job>/result.json`), Hydra job directories or
    Hydra's `multirun.yaml`; anything else is refused rather than given an empty table.
    """
    path = Path(path)
    if not path.exists():
        return f"{path} does not exist"
    if not path.is_dir():
        return f"{path} is not a directory"
    found = (
        (path / "multirun.yaml").exists()
        or next(path.rglob(RESULT_FILE), None) is not None
        or next(path.rglob(".hydra"), None) is not None
    )
    if not found:
        return (
            f"{path} holds no job results (no <job>/result.json) and is not a Hydra sweep "
            "directory; pass the directory a sweep wrote (hydra.sweep.dir)"
        )
    if writing and not os.access(path, os.W_OK):
        return f"{path} is not writable, so {RESULTS_CSV} cannot be written there"
    return None


def _write_csv(sweep_dir: Path, df: pd.DataFrame | None = None) -> tuple[Path, pd.DataFrame]:
    if df is None:
        df = collect_results(sweep_dir)
    out = Path(sweep_dir) / RESULTS_CSV
    tmp = out.with_name(f".{RESULTS_CSV}.tmp")
    try:
        to_csv(df, tmp)
        tmp.replace(out)  # a reader never sees a half-written table
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk keeps no half table
        raise
    return out, df


def to_csv(df: pd.DataFrame, path: Path) -> Path:
    """Export a results table: a list or dict becomes its JSON text, so the CSV keeps one
    row per job (a typed list metric recorded as null is written `null`)."""
    out = df.copy()
    for column in out.select_dtypes(include="object").columns:
        out[column] = [_csv_cell(column, v) for v in out[column]]
    out.to_csv(path, index=False)
    return Path(path)


def _csv_cell(column: str, value: Any) -> Any:
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    if value is None and column in JSON_METRICS:
        return "null"
    return value


def read_results_csv(path: Path) -> pd.DataFrame:
    """A results.csv as the table `collect_results` returns: JSON text back to lists and
    dicts (the JSON metrics, the engine settings, the trace list, list-valued config)."""
    df = pd.read_csv(path)
    decoded = {*JSON_METRICS, ENGINE_SETTINGS, PROFILE_PREFIX + "traces"}
    for column in df.select_dtypes(include="object").columns:
        if column in decoded or column.startswith(CONFIG_PREFIX):
            df[column] = [_from_json(v, strict=column in decoded) for v in df[column]]
    return df


def _from_json(cell: Any, *, strict: bool) -> Any:
    """A cell's JSON value; a config cell only where it holds a list or an object (a text
    setting stays text)."""
    if not isinstance(cell, str) or not (strict or cell.startswith(("[", "{"))):
        return cell
    try:
        return json.loads(cell)
    except json.JSONDecodeError:
        return cell


def write_results_csv(sweep_dir: Path, df: pd.DataFrame | None = None) -> Path:
    """(Re)build `<sweep_dir>/results.csv` from the job directories (or from their table
    `df`, already collected); return its path."""
    return _write_csv(Path(sweep_dir), df)[0]


def main(
    argv: list[str] | None = None, notes: Callable[[Path], list[str]] = lambda sweep: []
) -> int:
    """`notes(sweep)`: lines to say after a sweep's table (`python -m harness.results`
    passes whether the sweep is running now)."""
    parser = argparse.ArgumentParser(
        prog="python -m harness.results",
        description="Rebuild <sweep dir>/results.csv from the job directories' result.json.",
    )
    parser.add_argument("sweep_dir", type=Path, nargs="+")
    args = parser.parse_args(argv)
    refused = [p for p in map(sweep_dir_problem, args.sweep_dir) if p]
    for problem in refused:
        print(f"error: {problem}", file=sys.stderr)
    if refused:
        return 2
    for sweep in args.sweep_dir:
        out, df = _write_csv(sweep)
        counts = ", ".join(f"{n} {s}" for s, n in df["status"].value_counts().items())
        print(f"wrote {out}: {len(df)} jobs ({counts or 'none found'})")
        for line in notes(sweep):
            print(f"note: {line}")
        for problem in df.attrs["problems"]:
            print(f"skipped {problem}")
    return 0
