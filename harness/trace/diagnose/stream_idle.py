"""Each GPU stream's busy and idle time over the profiled steps, and why it sat idle.

A stream's idle time is the gaps between its consecutive kernels (copies and sets
included). A gap whose closing kernel was launched after the previous one ended is host
wait: the host had not issued the work yet. Otherwise the kernel was queued, and the gap is
a kernel wait when shorter than `kernel_wait_us` (back-to-back launch overhead), else other
(it waited on another stream, an event, the allocator). These are HolisticTraceAnalysis'
definitions, so its `get_idle_time_breakdown` checks this analysis on real traces.

`host_split_s` is the attribution's own rule applied to the same gaps: only the part of a
host-wait gap before the launch is the host's, the rest (the launch latency) is queued.
No torch.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.trace.classify import detect_kind
from harness.trace.diagnose.attribute_device import device_launches
from harness.trace.lanes import GPU_CATEGORIES, where
from harness.trace.overlap import merge, step_windows
from harness.trace.parse import Trace

STREAM_COLUMNS = [
    "stream", "span_s", "busy_s", "idle_s", "host_wait_s", "kernel_wait_s", "other_s",
    "host_split_s",
]  # fmt: skip
KERNEL_WAIT_US = 30.0  # HTA's default consecutive_kernel_delay


def stream_idle(trace: Trace, kernel_wait_us: float = KERNEL_WAIT_US) -> pd.DataFrame:
    """One row per GPU stream over the profiled steps' span (seconds)."""
    events = trace.events
    if detect_kind(events) != "gpu":
        return pd.DataFrame(columns=STREAM_COLUMNS)
    windows = step_windows(events, "gpu")
    lo, hi = float(windows["start"].min()), float(windows["end"].max())
    device = np.flatnonzero(where(events["cat"], lambda s: s.isin(GPU_CATEGORIES)))
    device = device[events["stream"].to_numpy()[device] >= 0]
    ts = events["ts"].to_numpy()[device]
    end = ts + events["dur"].to_numpy()[device]
    inside = (ts >= lo) & (end <= hi)
    launch, _ = device_launches(events, device)
    frame = pd.DataFrame(
        {"stream": events["stream"].to_numpy()[device], "ts": ts, "end": end, "launch": launch}
    )[inside]
    rows = []
    for stream, k in frame.sort_values(["stream", "ts"]).groupby("stream", sort=True):
        busy = merge(k["ts"].to_numpy(), k["end"].to_numpy())
        prev_end = k["end"].to_numpy()[:-1]
        gap = k["ts"].to_numpy()[1:] - prev_end
        late = k["launch"].to_numpy()[1:]
        host = late > prev_end  # NaN (launch not traced) compares False, as in HTA
        short = ~host & (gap < kernel_wait_us)
        split = np.clip(np.nan_to_num(late, nan=-np.inf), prev_end, prev_end + gap) - prev_end
        span = busy.end[-1] - busy.start[0]
        rows.append(
            {
                "stream": int(stream),
                "span_s": span * 1e-6,
                "busy_s": busy.length() * 1e-6,
                "idle_s": gap.sum() * 1e-6,
                "host_wait_s": gap[host].sum() * 1e-6,
                "kernel_wait_s": gap[short].sum() * 1e-6,
                "other_s": gap[~host & ~short].sum() * 1e-6,
                "host_split_s": split[host].sum() * 1e-6,
            }
        )
    return pd.DataFrame(rows, columns=STREAM_COLUMNS)
