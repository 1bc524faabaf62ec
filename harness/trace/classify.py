"""Sort trace events into computation, communication and memory copies, and into lanes.

GPU traces: every kernel is busy time on its stream; NCCL kernels are communication,
memcpy/memset are memory copies, every other kernel is computation.
CPU traces: the operators on the main thread (the one holding ProfilerStep#N) are
computation, except the calls that merely issue or wait on a collective (c10d::*); the
`gloo:*` spans on the gloo worker threads are communication.
Every other event (annotations, CUDA runtime calls, flows) is not busy time.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

COMPUTE, COMM, MEMORY, NONE = "compute", "comm", "memory", ""
TraceKind = Literal["gpu", "cpu"]

# the patterns HTA uses: ncclKernel_*/ncclDevKernel_*, and copies named as such
_NCCL_KERNEL_RE = r"^nccl.*Kernel"
_MEMORY_KERNEL_RE = r"^(Memcpy|Memset|dma)"
_COLLECTIVE_API_PREFIXES = ("c10d::", "_c10d_functional::", "record_param_comms")


def detect_kind(events: pd.DataFrame) -> TraceKind:
    """'gpu' when the trace holds any device kernel or copy, else 'cpu'."""
    return "gpu" if bool((events["stream"].to_numpy() >= 0).any()) else "cpu"


def main_thread(events: pd.DataFrame) -> tuple[str, str] | None:
    """(pid, tid) of the thread that runs the training loop: the one with ProfilerStep#N,
    else the CPU thread with the most operator time."""
    cpu = events[events["stream"].to_numpy() < 0]
    steps = cpu[cpu["name"].astype(str).str.startswith("ProfilerStep")]
    source = steps if not steps.empty else cpu[cpu["cat"] == "cpu_op"]
    if source.empty:
        return None
    busiest = source.groupby(["pid", "tid"], observed=True)["dur"].sum().idxmax()
    return str(busiest[0]), str(busiest[1])


def classify(events: pd.DataFrame, kind: TraceKind | None = None) -> np.ndarray:
    """One of COMPUTE, COMM, MEMORY or NONE for every event (an object array)."""
    kind = kind or detect_kind(events)
    labels = np.full(len(events), NONE, dtype=object)
    names = events["name"].astype(str)
    cats = events["cat"].astype(str).to_numpy()
    if kind == "gpu":
        kernel = cats == "kernel"
        nccl = names.str.match(_NCCL_KERNEL_RE).to_numpy()
        memory = (cats == "gpu_memcpy") | (cats == "gpu_memset")
        memory |= kernel & names.str.match(_MEMORY_KERNEL_RE).to_numpy()
        labels[kernel & ~nccl & ~memory] = COMPUTE
        labels[kernel & nccl] = COMM
        labels[memory] = MEMORY
        return labels
    main = main_thread(events)
    on_main = np.zeros(len(events), dtype=bool)
    if main is not None:
        on_main = (events["pid"].astype(str).to_numpy() == main[0]) & (
            events["tid"].astype(str).to_numpy() == main[1]
        )
    collective_api = names.str.startswith(_COLLECTIVE_API_PREFIXES).to_numpy()
    labels[on_main & (cats == "cpu_op") & ~collective_api] = COMPUTE
    labels[~on_main & names.str.startswith("gloo:").to_numpy()] = COMM
    return labels


def collective_api_mask(events: pd.DataFrame) -> np.ndarray:
    """CPU calls that issue a collective (their children must not count as computation)."""
    return events["name"].astype(str).str.startswith(_COLLECTIVE_API_PREFIXES).to_numpy() & (
        events["stream"].to_numpy() < 0
    )


def lanes(events: pd.DataFrame, kind: TraceKind | None = None) -> pd.Series:
    """A display lane per event: 'stream N' on GPU, the thread id on CPU."""
    kind = kind or detect_kind(events)
    if kind == "gpu":
        return "stream " + events["stream"].astype(str)
    return "thread " + events["tid"].astype(str)
