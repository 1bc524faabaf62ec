"""Matched comparisons over the results table: jobs and their grid points, loss parity.

A grid point may hold several runs of each engine (`repeats=N`, told apart by the
`repeat` column); loss parity is checked within each repeat. The speedups with their noise
are `harness.report.speedups`.

Pure functions over the `harness.results.table` DataFrame (no torch, no plotting), so each rule
is testable on a hand-made table.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from harness.engines.registry import BASELINES, ENGINES, YAFSDP, aa_twin_of, engine_order
from harness.jobdir.grid_point import MATCH_COLUMNS, REPEAT_COLUMN, GridPoint
from harness.jobdir.recorded_config import is_neutral
from harness.jobdir.result import Metrics, typed_fields
from harness.models.shapes import MODEL_SHAPES
from harness.results.table import CONFIG_PREFIX

BASELINE_TITLES = {label: ENGINES[label].title for label in BASELINES}


def twin_labels(df: pd.DataFrame) -> list[str]:
    """Labels the registry lacks under which YaFSDP itself ran (an A/A check,
    `engine=yafsdp engine.label=<another name>`, as `experiment=aa_check` runs): compared
    with YaFSDP like a baseline, any speedup they show is noise."""
    if df.empty or "engine_name" not in df:
        return []
    return sorted(
        str(label)
        for label, group in df.groupby("engine")
        if label not in ENGINES and (group["engine_name"] == YAFSDP).all()
    )


def baseline_title(label: str) -> str:
    """The heading of a comparison with YaFSDP: a baseline's title, or an A/A twin's."""
    if label in BASELINE_TITLES:
        return BASELINE_TITLES[label]
    return (
        f"YaFSDP again, as `{label}` (A/A check: the same engine and config under a second "
        "label, so every speedup here is noise)"
    )


# The YaFSDP README's row order: the published models by family and size, then the
# CPU-sized members of the same family, as `harness.models.shapes` lists them.
MODEL_ORDER = tuple(MODEL_SHAPES)
STATUS_CELL = {
    "oom": "OOM",
    "failed": "failed",
    "timeout": "timeout",
    "invalid": "invalid",
    "interrupted": "interrupted",
}
# Config fields beyond the grid point and setting that differ between the jobs shown
# ("lr=0.01, fault.kind=crash"): part of what matches jobs, so no job hides another.
VARIANT = "variant"
MISSING = "—"

# Loss parity tolerance, relative to the loss, by parameter dtype. Matched jobs start from
# the same weights and data, so they differ only by rounding: engines reduce gradients in
# a different order and at different shard boundaries, and each step's update carries that
# on. bf16 keeps 8 significant bits (a rounding is 0.4% relative), fp16 11 bits (0.05%);
# a few roundings of drift per step over a short run stays well under these bounds, while
# a missed or double-counted gradient reduction, a wrong scale or mis-sharded parameters
# move the loss by more than that within a few steps.
LOSS_RTOL = {"bf16": 2e-2, "fp16": 1e-2, "fp32": 1e-3}
DEFAULT_LOSS_RTOL = 2e-2


def model_display(name: str) -> str:
    """`llama2_7b` -> `Llama 2 7B` as in the README; CPU members keep their names."""
    m = re.fullmatch(r"llama(\d)_(\d+)b", str(name))
    return f"Llama {m.group(1)} {m.group(2)}B" if m else str(name)


def model_rank(name: str) -> tuple[int, str]:
    name = str(name)
    return (MODEL_ORDER.index(name), "") if name in MODEL_ORDER else (len(MODEL_ORDER), name)


def value(row: pd.Series | None, column: str) -> Any:
    """The cell, or None when the row, the column or the value is missing."""
    if row is None or column not in row.index:
        return None
    v = row[column]
    return None if v is None or (pd.api.types.is_scalar(v) and pd.isna(v)) else v


METRICS = frozenset(f.name for f in typed_fields(Metrics))


def metric(row: pd.Series | None, name: str) -> Any:
    """The job's `name` metric (a field of harness.jobdir.result.Metrics), or None where it was not
    measured. A name that Metrics lacks raises, so a misspelt metric cannot pass for an
    unmeasured one (a blank cell)."""
    if name not in METRICS:
        raise KeyError(f"{name!r} is not a metric: harness.jobdir.result.Metrics has no such field")
    return value(row, name)


def as_int(v: Any) -> Any:
    """Grid coordinates come back as floats when a column has gaps; show them as ints."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def sort_jobs(df: pd.DataFrame) -> pd.DataFrame:
    """Rows in the README order: model family/size, gpus, seq-len, ckpt layers, engine, then
    repeat."""
    if df.empty:
        return df
    keys = pd.DataFrame(
        {
            "_m": [model_rank(m) for m in df["model"]],
            "_g": pd.to_numeric(df["gpus"], errors="coerce"),
            "_s": pd.to_numeric(df["seq_len"], errors="coerce"),
            "_c": pd.to_numeric(df["ckpt_layers"], errors="coerce"),
            "_e": [engine_rank(e) for e in df["engine"]],
            "_r": [repeat_of(row) for _, row in df.iterrows()],
        },
        index=df.index,
    )
    order = keys.sort_values(["_m", "_g", "_s", "_c", "_e", "_r"], kind="stable").index
    return df.loc[order]


def engine_rank(label: str) -> tuple[int, str]:
    return engine_order(str(label))


def repeat_of(row: pd.Series) -> int:
    """Which run of its job a row is (0 for a job from a sweep without repeats)."""
    found = value(row, REPEAT_COLUMN)
    return int(found) if found is not None else 0


def match_key(row: pd.Series) -> GridPoint:
    """The grid point (and setting, and variant) of a job's row."""
    return GridPoint.of({c: value(row, c) for c in MATCH_COLUMNS}, value(row, VARIANT) or "")


def registered_engine(label: str) -> dict[str, Any] | None:
    """The engine config a label stands for (an A/A twin's is its engine's), flat as the
    table's `config.engine.*` columns; None for a label the registry lacks."""
    base = label if label in ENGINES else aa_twin_of(label)
    return None if base is None else asdict(ENGINES[base].config())


def off_registered(row: pd.Series) -> list[str]:
    """`engine.<knob>=<value> (registered: <value>)` for each engine knob of the job set
    away from its label's registered value: such a job is not the engine its label's
    title describes. A knob the result does not record counts as registered."""
    registered = registered_engine(str(row["engine"]))
    if registered is None:
        return []
    out = []
    for knob, expected in registered.items():
        if knob in ("name", "label"):
            continue
        found = value(row, f"{CONFIG_PREFIX}engine.{knob}")
        if found is not None and found != expected:
            out.append(f"engine.{knob}={_shown(found)} (registered: {_shown(expected)})")
    return out


def with_variants(df: pd.DataFrame) -> pd.DataFrame:
    """Add the VARIANT column from the `config.*` columns that vary between jobs.

    An engine knob (`config.engine.*`) counts when it varies within one engine label, or
    when a job's differs from its label's registered value (an fsdp1 reducing in bf16 is
    not the published baseline, however many fsdp1 jobs do so): fsdp2 and fsdp2_tuned
    differ by design and are told apart by their label.
    """
    fixed = {CONFIG_PREFIX + c for c in [*MATCH_COLUMNS, REPEAT_COLUMN]} | {
        CONFIG_PREFIX + "engine.name",
        CONFIG_PREFIX + "engine.label",
    }
    off = {o.split("=", 1)[0] for _, row in df.iterrows() for o in off_registered(row)}
    varying = []
    for column in (c for c in df.columns if c.startswith(CONFIG_PREFIX) and c not in fixed):
        field = column[len(CONFIG_PREFIX) :]
        shown = df[column].map(repr)  # absent (NaN) counts as a value of its own
        if is_neutral(field):
            continue
        if field.startswith("engine."):
            if field in off or (shown.groupby(df["engine"]).nunique() > 1).any():
                varying.append(column)
        elif shown.nunique() > 1:
            varying.append(column)
    df = df.copy()
    df[VARIANT] = [
        ", ".join(f"{c[len(CONFIG_PREFIX) :]}={_shown(value(row, c))}" for c in varying)
        for _, row in df.iterrows()
    ]
    return df


def _shown(v: Any) -> str:
    """A config value as a variant names it: a list or dict as its JSON text."""
    return json.dumps(v) if isinstance(v, (list, dict)) else str(as_int(v))


def point_label(key: GridPoint) -> str:
    return f"{model_display(key.model)}, {key.gpus} GPUs, seq {key.seq_len}, ckpt {key.ckpt_layers}"


def select_runs(df: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """One job per (grid point, engine, repeat): an ok run over a failed one, then the
    latest listed.

    Duplicates happen when sweeps are combined or a grid point was rerun; the notes say
    which. (A sweep's own repeats are different keys, not duplicates.)
    """
    if df.empty:
        return df, []
    groups: dict[tuple[GridPoint, str, int], list] = {}
    for idx, row in df.iterrows():
        groups.setdefault((match_key(row), str(row["engine"]), repeat_of(row)), []).append(idx)
    notes = []
    keep = []
    for (key, engine, repeat), indices in groups.items():
        group = df.loc[indices]
        ok = group[group["status"] == "ok"]
        chosen = (ok if not ok.empty else group).iloc[-1]  # rows keep the sweeps' order
        keep.append(chosen.name)
        if len(group) > 1:
            others = ", ".join(str(j) for j in group["job_label"] if j != chosen["job_label"])
            which = f", repeat {repeat}" if repeat else ""
            notes.append(
                f"{point_label(key)}, engine {engine}{which}: {len(group)} runs; "
                f"using {chosen['job_label']} (ignored: {others})"
            )
    return df.loc[sorted(keep)], notes


def losses_of(row: pd.Series) -> list[float]:
    losses = metric(row, "losses") or []
    return [math.nan if x is None else float(x) for x in losses]


@dataclass(frozen=True)
class LossParity:
    """The largest loss difference between a job and the reference job at its grid point."""

    key: GridPoint
    engine: str
    reference: str
    steps: int  # steps compared (the shorter curve)
    max_abs_diff: float  # nan when a curve has a non-finite loss the other has not
    at_step: int
    rel_diff: float
    rtol: float
    note: str = ""
    repeat: int = 0  # the run compared: each repeat with the reference's run of that repeat

    @property
    def mismatch(self) -> bool:
        return not (self.rel_diff <= self.rtol)  # nan counts as a mismatch


def loss_parity(df: pd.DataFrame) -> list[LossParity]:
    """Compare every ok job's loss curve with the reference engine's at the same grid point
    and repeat.

    The reference is yafsdp where it ran, else the first engine in table order.
    """
    out = []
    ok = df[df["status"] == "ok"]
    for key, point in by_point(ok):
        repeats: dict[int, list] = {}
        for idx, row in point.iterrows():
            repeats.setdefault(repeat_of(row), []).append(idx)
        for repeat, indices in sorted(repeats.items()):
            out += _parity_at(key, repeat, point.loc[indices])
    return out


def _parity_at(key: GridPoint, repeat: int, group: pd.DataFrame) -> list[LossParity]:
    curves = {r["engine"]: (r, losses_of(r)) for _, r in group.iterrows()}
    curves = {e: c for e, c in curves.items() if c[1]}
    if len(curves) < 2:
        return []
    out = []
    engines = sorted(curves, key=engine_rank)
    ref = engines[0]
    ref_losses = curves[ref][1]
    rtol = LOSS_RTOL.get(str(key.setting.dtype), DEFAULT_LOSS_RTOL)
    for engine in engines[1:]:
        losses = curves[engine][1]
        n = min(len(losses), len(ref_losses))
        note = (
            ""
            if len(losses) == len(ref_losses)
            else (f"curves differ in length ({len(losses)} vs {len(ref_losses)} steps)")
        )
        worst = (0.0, 0, 0.0)
        for step in range(n):
            a, b = losses[step], ref_losses[step]
            if not (math.isfinite(a) and math.isfinite(b)):
                # A diverged run cannot be matched with anything, even another diverged one.
                worst = (math.nan, step, math.nan)
                note = f"non-finite loss at step {step} ({engine} {a}, {ref} {b})"
                break
            diff = abs(a - b)
            rel = diff / max(abs(a), abs(b), 1e-12)
            if rel > worst[2]:
                worst = (diff, step, rel)
        out.append(
            LossParity(key, engine, ref, n, worst[0], worst[1], worst[2], rtol, note, repeat)
        )
    return out


def by_point(df: pd.DataFrame) -> list[tuple[GridPoint, pd.DataFrame]]:
    groups: dict[GridPoint, list] = {}
    for idx, row in sort_jobs(df).iterrows():
        groups.setdefault(match_key(row), []).append(idx)
    return [(k, df.loc[v]) for k, v in groups.items()]
