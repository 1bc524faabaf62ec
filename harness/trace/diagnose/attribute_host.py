"""The exclusive sweep over a CPU trace's main thread (gloo: collectives run on gloo's own
threads while the main thread computes, or waits on their work handles).

Each microsecond of a step goes, in this order, to:
- an operator the main thread computes in (the summary's computation: not inside a call
  that issues or waits on a collective): the optimizer's or the engine's when the
  innermost role-bearing range around it is theirs, else the model's, GEMM and attention
  (by the innermost operator's name) apart from the rest;
- a collective running on a gloo thread (exposed communication, by the engine's kind and
  unit where its range names them, else by the span's name);
- a collective call with nothing running: issued but waiting (`queued`);
- the engine's or the optimizer's range (their own Python, between operators);
- anything else on the main thread: `host.other`.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from harness.trace.classify import COMM, COMPUTE, classify, collective_api_mask
from harness.trace.diagnose import causes as C
from harness.trace.diagnose.yardstick import collective_kind
from harness.trace.lanes import main_thread, on_thread, where
from harness.trace.overlap import collective_issue, merge
from harness.trace.parse import Trace
from harness.trace.ranges import ENGINE, OPTIMIZER, Ranges, thread_ids
from harness.trace.sweep_line import Tally, paint, segments

GEMM_OP = re.compile(
    r"^aten::(mm|addmm|bmm|baddbmm|addbmm|matmul|linear|einsum|_?scaled_dot_product|"
    r"_flash_attention|_efficient_attention|convolution|_convolution|conv\w*)"
)


def _comm_causes(
    events: pd.DataFrame, labels: np.ndarray, ranges: Ranges
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(event indices, cause, unit) of every gloo span: the kind and unit of the engine
    range its issuing call sat in, else the kind its name says."""
    idx, issued, thread = collective_issue(events, "cpu", labels)
    names = events["name"].to_numpy()[idx].astype(str)
    inner = ranges.innermost(thread, np.nan_to_num(issued, nan=-np.inf))
    roles = ranges.role_of(inner)
    cause = np.empty(idx.size, dtype=object)
    unit = np.empty(idx.size, dtype=object)
    for i, (name, role) in enumerate(zip(names, roles, strict=True)):
        engine = role is not None and role.role == ENGINE and role.kind in C.COLLECTIVE_KINDS
        cause[i] = C.exposed_comm(role.kind if engine and role else collective_kind(name))
        unit[i] = role.unit if engine and role else ""
    return idx, cause, unit


def attribute_host(trace: Trace, windows: pd.DataFrame) -> Tally:
    """Seconds per cause (and unit) of every step window of a CPU trace."""
    events = trace.events
    labels = classify(events, "cpu")
    main = on_thread(events, main_thread(events))
    ts = events["ts"].to_numpy()
    end = ts + events["dur"].to_numpy()
    ops = np.flatnonzero(main & (labels == COMPUTE))
    api = main & collective_api_mask(events) & (labels != COMM)
    api_iv = merge(ts[api], end[api])
    ranges = Ranges(events)
    main_id = thread_ids(events)[np.flatnonzero(main)[:1]]
    on_main_ranges = ranges.thread == (main_id[0] if main_id.size else -2)
    comm_idx, comm_cause, comm_unit = _comm_causes(events, labels, ranges)

    seg = segments(
        [ts[ops], end[ops], ts[comm_idx], end[comm_idx], api_iv.start, api_iv.end,
         ranges.start[on_main_ranges], ranges.end[on_main_ranges]],
        windows,
    )  # fmt: skip
    op_owner = paint(seg, ts[ops], end[ops], np.argsort(ts[ops], kind="stable"))
    comm_owner = paint(seg, ts[comm_idx], end[comm_idx], np.argsort(ts[comm_idx], kind="stable"))
    k = np.searchsorted(api_iv.start, seg.mid, side="right") - 1
    in_api = (k >= 0) & (seg.mid < api_iv.end[np.clip(k, 0, None)])
    thread = np.full(seg.start.size, main_id[0] if main_id.size else -2)
    role, _, role_unit = ranges.columns(ranges.innermost(thread, seg.mid))

    cause = np.full(seg.start.size, C.HOST_OTHER, dtype=object)
    unit = np.full(seg.start.size, "", dtype=object)
    # lowest priority first: each later rule overrides the earlier ones where it applies
    cause[role == ENGINE], unit[role == ENGINE] = C.ENGINE, role_unit[role == ENGINE]
    cause[role == OPTIMIZER] = C.OPTIMIZER
    cause[in_api], unit[in_api] = C.QUEUED, ""
    comm = comm_owner >= 0
    cause[comm], unit[comm] = comm_cause[comm_owner[comm]], comm_unit[comm_owner[comm]]
    computing = (op_owner >= 0) & ~in_api
    gemm = where(events["name"], lambda s: s.str.match(GEMM_OP))[ops]
    family = np.where(gemm, C.COMPUTE_GEMM_ATTENTION, C.COMPUTE_OTHER).astype(object)
    family = family[op_owner[computing]]
    ctx = role[computing]
    family[ctx == ENGINE] = C.ENGINE
    family[ctx == OPTIMIZER] = C.OPTIMIZER
    cause[computing] = family
    unit[computing] = np.where(ctx == ENGINE, role_unit[computing], "")
    tally = Tally(len(windows))
    tally.add(seg.window, cause, seg.length, unit)
    return tally
