"""Rounds of every benchmark. pytest-benchmark's median and `pytest-benchmark compare` of
saved runs (`--benchmark-autosave`) need several: `pedantic` runs one unless told.
BENCH_ROUNDS raises it (never below 3, the fewest with a median that is not an end)."""

from __future__ import annotations

import os
import statistics
from typing import Any

ROUNDS = max(3, int(os.environ.get("BENCH_ROUNDS", "3")))


def median_by_label(runs: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per label and figure, the median over the rounds' runs (figures that are not
    numbers: the last round's)."""
    out: dict[str, dict[str, Any]] = {}
    for label, last in runs[-1].items():
        out[label] = {
            key: statistics.median(r[label][key] for r in runs)
            if isinstance(value, int | float) and not isinstance(value, bool)
            else value
            for key, value in last.items()
        }
    return out
