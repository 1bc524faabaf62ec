"""Which CPU operators the host was in while the device waited for it.

The host part of an idle gap (before the launch of the event that ended it) is laid over
the outermost operators (`cpu_op`, the calls a user wrote: `aten::item`, not what runs
inside them) on the launching thread; each operator's overlap is summed by name per step.
No torch.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.trace.lanes import on_cpu, where
from harness.trace.ranges import thread_ids


def _outermost_ops(events: pd.DataFrame) -> pd.DataFrame:
    """(thread, start, end, name) of the CPU operators no other operator on their thread
    encloses, sorted by thread and start; they do not overlap."""
    op = np.flatnonzero(on_cpu(events) & where(events["cat"], lambda s: s == "cpu_op"))
    ts = events["ts"].to_numpy()[op]
    frame = pd.DataFrame(
        {
            "thread": thread_ids(events)[op],
            "start": ts,
            "end": ts + events["dur"].to_numpy()[op],
            "name": events["name"].to_numpy()[op],
        }
    ).sort_values(["thread", "start"], kind="stable")
    reach = frame.groupby("thread")["end"].cummax().groupby(frame["thread"]).shift(1)
    return frame[~(frame["start"] < reach)].reset_index(drop=True)


def host_ops_in(
    events: pd.DataFrame, thread: np.ndarray, lo: np.ndarray, hi: np.ndarray, window: np.ndarray
) -> pd.DataFrame:
    """Seconds of each outermost operator inside the pieces [lo, hi) of `thread`, per window:
    columns window, name, seconds."""
    ops = _outermost_ops(events)
    out = []
    for th in np.unique(thread[(thread >= 0) & (hi > lo)]):
        q = (thread == th) & (hi > lo)
        mine = ops[ops["thread"] == th]
        if mine.empty:
            continue
        p_lo, p_hi, p_w = lo[q], hi[q], window[q]
        order = np.argsort(p_lo)
        p_lo, p_hi, p_w = p_lo[order], p_hi[order], p_w[order]
        o_lo, o_hi = mine["start"].to_numpy(), mine["end"].to_numpy()
        edges = np.unique(np.concatenate([p_lo, p_hi, o_lo, o_hi]))
        mid = (edges[:-1] + edges[1:]) / 2
        piece = np.searchsorted(p_lo, mid, side="right") - 1
        op = np.searchsorted(o_lo, mid, side="right") - 1
        both = (piece >= 0) & (op >= 0)
        both[both] &= (mid[both] < p_hi[piece[both]]) & (mid[both] < o_hi[op[both]])
        length = np.diff(edges)[both]
        out.append(
            pd.DataFrame(
                {
                    "window": p_w[piece[both]],
                    "name": mine["name"].to_numpy()[op[both]].astype(str),
                    "seconds": length * 1e-6,
                }
            )
        )
    if not out:
        return pd.DataFrame(columns=["window", "name", "seconds"])
    return pd.concat(out).groupby(["window", "name"], as_index=False)["seconds"].sum()
