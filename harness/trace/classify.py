"""Sort trace events into computation, communication and memory copies, and into lanes.

GPU traces: every kernel is busy time on its stream; NCCL kernels are communication,
memcpy/memset are memory copies, every other kernel is computation.
CPU traces: the operators on the main thread (the one holding ProfilerStep#N) are
computation, except the calls that merely issue or wait on a collective (c10d::*) and the
autograd wrappers (`autograd::engine::evaluate_function: ...`, `...Backward0` nodes,
AccumulateGrad): engine hooks run inside those and may block on a collective there, so only
the operators nested in them count. The `gloo:*` spans on the gloo worker threads are
communication.
Every other event (annotations, CUDA runtime calls, flows) is not busy time.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

from harness.trace.lanes import main_thread, on_thread, where

__all__ = ["classify", "collective_api_mask", "detect_kind", "main_thread", "on_thread"]

COMPUTE, COMM, MEMORY, NONE = "compute", "comm", "memory", ""
TraceKind = Literal["gpu", "cpu"]

# the patterns HTA uses: ncclKernel_*/ncclDevKernel_*, and copies named as such
_NCCL_KERNEL_RE = r"^nccl.*Kernel"
_MEMORY_KERNEL_RE = r"^(Memcpy|Memset|dma)"
_COLLECTIVE_API_PREFIXES = ("c10d::", "_c10d_functional::", "record_param_comms")
_AUTOGRAD_WRAPPER_RE = r"^autograd::engine::evaluate_function|Backward\d*$|^torch::autograd::"


def detect_kind(events: pd.DataFrame) -> TraceKind:
    """'gpu' when the trace holds any device kernel or copy, else 'cpu'."""
    return "gpu" if bool((events["stream"].to_numpy() >= 0).any()) else "cpu"


def classify(events: pd.DataFrame, kind: TraceKind | None = None) -> np.ndarray:
    """One of COMPUTE, COMM, MEMORY or NONE for every event (an object array)."""
    kind = kind or detect_kind(events)
    labels = np.full(len(events), NONE, dtype=object)
    name, cat = events["name"], events["cat"]
    if kind == "gpu":
        kernel = where(cat, lambda s: s == "kernel")
        nccl = where(name, lambda s: s.str.match(_NCCL_KERNEL_RE))
        memory = where(cat, lambda s: s.isin(["gpu_memcpy", "gpu_memset"]))
        memory |= kernel & where(name, lambda s: s.str.match(_MEMORY_KERNEL_RE))
        labels[kernel & ~nccl & ~memory] = COMPUTE
        labels[kernel & nccl] = COMM
        labels[memory] = MEMORY
        return labels
    on_main = on_thread(events, main_thread(events))
    cpu_op = where(cat, lambda s: s == "cpu_op")
    wrapper = where(name, lambda s: s.str.contains(_AUTOGRAD_WRAPPER_RE))
    labels[on_main & cpu_op & ~collective_api_mask(events) & ~wrapper] = COMPUTE
    labels[~on_main & where(name, lambda s: s.str.startswith("gloo:"))] = COMM
    return labels


def collective_api_mask(events: pd.DataFrame) -> np.ndarray:
    """CPU calls that issue a collective (their children must not count as computation)."""
    api = where(events["name"], lambda s: s.str.startswith(_COLLECTIVE_API_PREFIXES))
    return api & (events["stream"].to_numpy() < 0)
