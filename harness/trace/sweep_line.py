"""The exclusive sweep's arithmetic: cut a lane's time into elementary segments, give each
segment the event that owns it, and sum seconds per (step, cause[, unit]).

Segments run between consecutive distinct edges (every event's start and end, and the
step windows' bounds), so within a segment nothing starts or ends and one owner holds it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from harness.trace.overlap import Intervals


class Segments(NamedTuple):
    start: np.ndarray
    end: np.ndarray
    window: np.ndarray  # index of the step window holding the segment, -1 outside all

    @property
    def length(self) -> np.ndarray:
        return self.end - self.start

    @property
    def mid(self) -> np.ndarray:
        return (self.start + self.end) / 2


def segments(edges: list[np.ndarray], windows: pd.DataFrame) -> Segments:
    """Elementary segments between the given edges and the windows' bounds."""
    lo, hi = windows["start"].to_numpy(float), windows["end"].to_numpy(float)
    cuts = np.unique(np.concatenate([*edges, lo, hi]))
    start, end = cuts[:-1], cuts[1:]
    w = np.searchsorted(lo, start, side="right") - 1
    inside = (w >= 0) & (end <= hi[np.clip(w, 0, None)])
    return Segments(start, end, np.where(inside, w, -1))


def paint(seg: Segments, start: np.ndarray, end: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Owner of every segment: the events are laid down in `order`, each covering the
    segments inside it, so the last one laid down over a segment owns it (-1: none)."""
    owner = np.full(seg.start.size, -1, dtype=np.int64)
    first = np.searchsorted(seg.start, start, side="left")
    last = np.searchsorted(seg.start, end, side="left")
    for i in order.tolist():
        owner[first[i] : last[i]] = i
    return owner


def covered_before(iv: Intervals, t: np.ndarray) -> np.ndarray:
    """Length of merged intervals `iv` lying before each time in `t`."""
    if iv.start.size == 0:
        return np.zeros(t.size)
    lengths = iv.end - iv.start
    before = np.concatenate([[0.0], np.cumsum(lengths)])
    k = np.searchsorted(iv.start, t, side="right") - 1
    partial = np.clip(t - iv.start[np.clip(k, 0, None)], 0.0, lengths[np.clip(k, 0, None)])
    return np.where(k >= 0, before[np.clip(k, 0, None)] + partial, 0.0)


def covered(iv: Intervals, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Length of merged intervals `iv` inside each [lo, hi)."""
    return np.maximum(covered_before(iv, hi) - covered_before(iv, lo), 0.0)


class Tally:
    """Seconds per (window, cause) and per (window, cause, unit), from microsecond pieces."""

    def __init__(self, n_windows: int) -> None:
        self.causes: list[dict[str, float]] = [{} for _ in range(n_windows)]
        self.units: list[dict[str, dict[str, float]]] = [{} for _ in range(n_windows)]
        # CPU operator -> seconds the host spent in it while the device waited for it
        self.host_ops: list[dict[str, float]] = [{} for _ in range(n_windows)]

    def add(
        self,
        window: np.ndarray,
        cause: np.ndarray,
        us: np.ndarray,
        unit: np.ndarray | None = None,
    ) -> None:
        keep = (window >= 0) & (us > 0)
        if not keep.any():
            return
        frame = pd.DataFrame({"w": window[keep], "c": cause[keep], "s": us[keep] * 1e-6})
        for (w, c), s in frame.groupby(["w", "c"], sort=False)["s"].sum().items():
            self.causes[int(w)][str(c)] = self.causes[int(w)].get(str(c), 0.0) + float(s)
        if unit is None:
            return
        frame["u"] = unit[keep]
        frame = frame[frame["u"] != ""]
        for (w, c, u), s in frame.groupby(["w", "c", "u"], sort=False)["s"].sum().items():
            by_unit = self.units[int(w)].setdefault(str(c), {})
            by_unit[str(u)] = by_unit.get(str(u), 0.0) + float(s)
