"""The profiler ranges that say whose work a launch or an operator is: the engine's, the
model's, or the optimizer's; and the innermost such range around any time on a thread.

A range's role comes from its name alone, by the engines' own grammars
(`parse_unit_annotation`) and namespaces, and torch's own optimizer ranges
(`Optimizer.step#AdamW.step`, `Optimizer.zero_grad#...`). The engine's unit ranges of the
model's own compute (`yafsdp.forward.layers.3`, FSDP1's `FullyShardedDataParallel.forward`) are
the model's: what the engine itself adds runs in its other ranges. No torch.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np
import pandas as pd

from harness.trace.lanes import on_cpu, where
from harness.trace.overlap import parse_unit_annotation
from yafsdp_impl import annotation_names as yafsdp_names

ENGINE, MODEL, OPTIMIZER = "engine", "model", "optimizer"
_OPTIMIZER = re.compile(r"^Optimizer\.(step|zero_grad)#")
# the namespaces the engines name every range of their own in
_ENGINE_NAMESPACES = (f"{yafsdp_names.PREFIX}.", "FSDP::", "FullyShardedDataParallel.")
_YAFSDP_WAIT = re.compile(
    rf"^{yafsdp_names.PREFIX}\.wait\.(?P<kind>[a-z_]+)\.(?P<unit>{yafsdp_names.UNIT})$"
)
_MODEL_KINDS = ("forward", "backward")


class Role(NamedTuple):
    role: str  # ENGINE, MODEL or OPTIMIZER
    kind: str  # the engine's kind of range (all_gather, ...), '' when it names none
    unit: str  # the unit it acts on, '' when unknown


def range_role(name: str) -> Role | None:
    """The role of a profiler range by its name, or None for ranges that say nothing."""
    if _OPTIMIZER.match(name):
        return Role(OPTIMIZER, "", "")
    unit = parse_unit_annotation(name)
    if unit is not None:
        kind, label = unit
        return Role(MODEL if kind in _MODEL_KINDS else ENGINE, kind, label)
    wait = _YAFSDP_WAIT.match(name)
    if wait is not None:
        return Role(ENGINE, wait.group("kind"), wait.group("unit"))
    if name.startswith(_ENGINE_NAMESPACES):
        return Role(ENGINE, "", "")
    return None


def thread_ids(events: pd.DataFrame) -> np.ndarray:
    """One integer per (pid, tid), comparable across the events of one trace."""
    ids = events["pid"].cat.codes.to_numpy().astype(np.int64) << 32
    return ids | events["tid"].cat.codes.to_numpy().astype(np.int64)


class Ranges:
    """The role-bearing ranges on the CPU threads of one trace, for innermost look-ups."""

    def __init__(self, events: pd.DataFrame) -> None:
        names = events["name"]
        roles = {n: range_role(n) for n in names.cat.categories.astype(str)}
        has_role = where(names, lambda s: s.map(lambda n: roles[n] is not None).astype(bool))
        idx = np.flatnonzero(has_role & on_cpu(events))
        thread = thread_ids(events)[idx]
        start = events["ts"].to_numpy()[idx]
        order = np.lexsort((start, thread))
        idx = idx[order]
        self.thread = thread[order]
        self.start = start[order]
        self.end = self.start + events["dur"].to_numpy()[idx]
        self.roles: list[Role] = [roles[str(n)] for n in names.to_numpy()[idx]]  # type: ignore[misc]
        self.parent = self._parents()

    def _parents(self) -> np.ndarray:
        """The enclosing range of each range on its thread (-1 at the top)."""
        parent = np.full(self.start.size, -1, dtype=np.int64)
        stack: list[int] = []
        for i in range(self.start.size):
            if stack and self.thread[stack[-1]] != self.thread[i]:
                stack.clear()
            while stack and self.end[stack[-1]] <= self.start[i]:
                stack.pop()
            parent[i] = stack[-1] if stack else -1
            stack.append(i)
        return parent

    def innermost(self, thread: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Index (into this object's ranges) of the innermost range on `thread` holding time
        `t`, for each query; -1 where none does."""
        out = np.full(t.size, -1, dtype=np.int64)
        for th in np.unique(thread):
            q = np.flatnonzero(thread == th)
            lo, hi = np.searchsorted(self.thread, [th, th + 1])
            if lo == hi:
                continue
            cand = lo + np.searchsorted(self.start[lo:hi], t[q], side="right") - 1
            cand[cand < lo] = -1
            while True:
                bad = (cand >= 0) & (self.end[np.clip(cand, 0, None)] <= t[q])
                if not bad.any():
                    break
                cand[bad] = self.parent[cand[bad]]
            out[q] = cand
        return out

    def role_of(self, index: np.ndarray) -> list[Role | None]:
        return [self.roles[i] if i >= 0 else None for i in index]

    def columns(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(role, kind, unit) of the ranges at `index` as arrays, '' where index is -1; the
        unit only of the engine's ranges (the model's name units too, but its work is its own)."""
        none = Role("", "", "")
        table = [*self.roles, none]  # index -1 reads the last row
        role = np.array([r.role for r in table], dtype=object)
        kind = np.array([r.kind for r in table], dtype=object)
        unit = np.array([r.unit if r.role == ENGINE else "" for r in table], dtype=object)
        return role[index], kind[index], unit[index]
