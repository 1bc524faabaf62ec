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


def engine_setup_table(df: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Header (setting, then one column per engine) and rows; a setting that differs
    between one engine's jobs lists its values, one that an engine lacks is `—`."""
    if df.empty or SETTINGS_COLUMN not in df.columns:
        return [], []
    by_engine: dict[str, dict[str, list[str]]] = {}
    for _, row in df.iterrows():
        settings = _settings_of(row[SETTINGS_COLUMN])
        if settings is None:
            continue
        seen = by_engine.setdefault(str(row["engine"]), {})
        for key, value in settings.items():
            cell = compact(value)
            values = seen.setdefault(key, [])
            if cell not in values:
                values.append(cell)
    if not by_engine:
        return [], []
    engines = sorted(by_engine, key=engine_order)
    keys: list[str] = []
    for engine in engines:
        keys += [k for k in by_engine[engine] if k not in keys]
    rows = []
    for key in keys:
        cells = []
        for engine in engines:
            shown = by_engine[engine].get(key)
            cells.append(" / ".join(shown) if shown else NOT_SET)
        rows.append([key, *cells])
    return ["setting", *engines], rows
