"""The "How each engine was set up" table: every engine's effective settings, as its jobs
recorded them in result.json `engine_settings` (a pure function of the results table)."""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from harness.engines.registry import engine_order

SETTINGS_COLUMN = "engine_settings"
NOT_SET = "—"


def compact(value: Any) -> str:
    """One readable cell: group lists run-length encoded, block indices collapsed."""
    if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
        return _collapse_blocks(["+".join(map(str, group)) for group in value])
    if isinstance(value, list) and value and all(isinstance(v, bool) for v in value):
        return _run_lengths([str(v) for v in value])
    if isinstance(value, list):
        return _collapse_blocks([str(v) for v in value])
    if value is None:
        return "None"
    return str(value)


def _collapse_blocks(names: list[str]) -> str:
    """`layers.0, layers.1, ..., layers.7` -> `layers.0 … layers.7 (one each)`."""
    out: list[str] = []
    run: list[int] = []

    def flush() -> None:
        if len(run) > 2:
            out.append(f"layers.{run[0]} … layers.{run[-1]} (one each)")
        else:
            out.extend(f"layers.{i}" for i in run)
        run.clear()

    for name in names:
        m = re.fullmatch(r"layers\.(\d+)", name)
        if m and (not run or int(m.group(1)) == run[-1] + 1):
            run.append(int(m.group(1)))
            continue
        flush()
        if m:
            run.append(int(m.group(1)))
        else:
            out.append(name)
    flush()
    return "; ".join(out)


def _run_lengths(values: list[str]) -> str:
    parts: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j < len(values) and values[j] == values[i]:
            j += 1
        parts.append(values[i] if j - i == 1 else f"{values[i]} ×{j - i}")
        i = j
    return ", ".join(parts)


def _settings_of(cell: Any) -> dict[str, Any] | None:
    return cell if isinstance(cell, dict) else None  # None or NaN: none recorded


def _job_names(row: pd.Series) -> tuple[str, str]:
    """A job's short name (its model) and its long one (model, seq-len, checkpointed layers)."""

    def shown(key: str) -> str:
        value = row.get(key)
        if isinstance(value, float) and value.is_integer():  # a column with gaps is float
            value = int(value)
        return "?" if value is None or value != value else str(value)

    model = shown("model")
    return model, f"{model} seq {shown('seq_len')} ckpt {shown('ckpt_layers')}"


def _cell(values: dict[str, list[tuple[str, str]]]) -> str:
    """One value as it is; several, each after the jobs that recorded it (by model where
    that tells them apart, else by model, seq-len and checkpointed layers), one a line."""
    if not values:
        return NOT_SET
    if len(values) == 1:
        return next(iter(values))
    short = {v: sorted({s for s, _ in jobs}) for v, jobs in values.items()}
    distinct = all(not set(a) & set(b) for a, b in _pairs(list(short.values())))
    names = short if distinct else {v: sorted({lg for _, lg in jobs}) for v, jobs in values.items()}
    return "<br>".join(f"{', '.join(names[v])}: {v}" for v in values)


def _pairs(items: list[Any]) -> list[tuple[Any, Any]]:
    return [(a, b) for i, a in enumerate(items) for b in items[i + 1 :]]


def engine_setup_table(df: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Header (setting, then one column per engine) and rows; a setting that differs
    between one engine's jobs lists its values with the jobs of each, one that an engine
    lacks is `—`."""
    if df.empty or SETTINGS_COLUMN not in df.columns:
        return [], []
    by_engine: dict[str, dict[str, dict[str, list[tuple[str, str]]]]] = {}
    for _, row in df.iterrows():
        settings = _settings_of(row[SETTINGS_COLUMN])
        if settings is None:
            continue
        seen = by_engine.setdefault(str(row["engine"]), {})
        for key, value in settings.items():
            seen.setdefault(key, {}).setdefault(compact(value), []).append(_job_names(row))
    if not by_engine:
        return [], []
    engines = sorted(by_engine, key=engine_order)
    keys: list[str] = []
    for engine in engines:
        keys += [k for k in by_engine[engine] if k not in keys]
    rows = [[key, *[_cell(by_engine[e].get(key, {})) for e in engines]] for key in keys]
    return ["setting", *engines], rows
