"""Why (measured): under each speedup table, the traced difference of the matched jobs, cause
by cause, beside the planner's prediction in the same cause names.

`PLANNER_CAUSES` is the one table that says which measured causes (`harness.trace.diagnose.causes`)
each of the planner's terms predicts: its breakdown's parts (`harness.plan.time.timing`) and its
mechanisms (`harness.plan.time.mechanisms`). A table row joins the planner's terms and the
causes they share, so a reader sees where the model and the measurement part; causes the
planner does not model (a late rank, a slow collective) are rows of their own.
No torch: the traces are read by `harness.trace.diagnose.why`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from harness.report.compare import point_label
from harness.report.markdown import md_table
from harness.report.speedups import Speedup
from harness.trace.diagnose import causes as C
from harness.trace.diagnose.ranks import SKEW
from harness.trace.diagnose.why import WhyError, describe, why
from harness.trace.parse import TraceError

Measured = dict[tuple[str, str], dict[str, Any]]  # (yafsdp job, baseline job) -> `why`

_HOST = (C.HOST_SYNC, C.HOST_ALLOCATOR, C.HOST_OTHER)
_COMPUTE = (C.COMPUTE_GEMM_ATTENTION, C.COMPUTE_OTHER)

# The planner's terms -> the measured causes each predicts: first the parts of its
# breakdown (harness.plan.time.timing.compute_stream_breakdown), which sum to its step
BREAKDOWN_CAUSES: dict[str, tuple[str, ...]] = {
    "compute": _COMPUTE,
    "overlap slowdown": _COMPUTE,  # compute kernels made longer by overlapping work
    "optimizer": (C.OPTIMIZER,),
    "exposed all_gather": (C.COMM_ALL_GATHER,),
    "exposed reduce_scatter": (C.COMM_REDUCE_SCATTER,),
    "exposed all_reduce": (C.COMM_ALL_REDUCE,),
    "exposed collective": (C.COMM_OTHER,),
    "waits for the host": _HOST,
    "waits for the side stream": (C.QUEUED,),
    "fsdp1_flat_grad": (C.ENGINE,),
    "fsdp1_shard_cast": (C.ENGINE,),
    "fsdp1_grad_upcast": (C.ENGINE,),
    "fsdp2_copy_in_out": (C.ENGINE,),
    "yafsdp_buffers": (C.ENGINE,),
    "local_grad_cast": (C.ENGINE,),
    "launch_overhead": _HOST,
}
# ... then its mechanisms (harness.plan.time.mechanisms), each priced on its own
PLANNER_CAUSES: dict[str, tuple[str, ...]] = {
    **BREAKDOWN_CAUSES,
    "rate_limiter": (C.HOST_SYNC,),  # FSDP1 blocks the host on an event
    "nccl_sm_contention": _COMPUTE,
    "side_stream_sharing": _COMPUTE,
    # reduce-scatters late behind chain kernels that give way to GEMMs, and the all-gathers
    # queued behind them on the one communication stream: compute waits on both
    "give_way": (C.COMM_REDUCE_SCATTER, C.COMM_ALL_GATHER),
    "slowest_rank": (SKEW,),  # a collective starts when its last rank arrives
    "allocator retries": (C.HOST_ALLOCATOR, C.HOST_SYNC),  # a retry frees the cache and syncs
}


def cause_rows(terms: list[str]) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """(planner terms, causes) of each row: planner terms that share a cause share a row;
    a measured cause no planner term names is a row of its own."""
    rows: list[tuple[set[str], set[str]]] = []
    for term in terms:
        found = set(PLANNER_CAUSES.get(term, ()))
        joined = [r for r in rows if r[1] & found]
        merged = ({term}, found)
        for r in joined:
            rows.remove(r)
            merged[0].update(r[0])
            merged[1].update(r[1])
        rows.append(merged)
    named = set().union(*(r[1] for r in rows)) if rows else set()
    rows += [(set(), {c}) for c in (*C.ORDER, SKEW) if c not in named]
    order = {c: i for i, c in enumerate((*C.ORDER, SKEW))}
    out = [
        (tuple(sorted(t)), tuple(sorted(c, key=lambda x: order.get(x, len(order)))))
        for t, c in rows
        if c
    ]
    return sorted(out, key=lambda r: order.get(r[1][0], len(order)))


def job_path(row: pd.Series) -> Path:
    return Path(str(row["sweep"])) / str(row["job_dir"])


def measured_comparisons(rows: list[Speedup]) -> Measured:
    """`why` of every row's jobs (baseline against yafsdp), keyed by their job labels; a
    pair that cannot be compared holds {'error': one line}."""
    out: Measured = {}
    for row in rows:
        if row.yafsdp is None or row.baseline is None:
            continue
        key = (str(row.yafsdp["job_label"]), str(row.baseline["job_label"]))
        try:
            out[key] = why(job_path(row.yafsdp), job_path(row.baseline))
        except (WhyError, TraceError, OSError, ValueError) as e:
            out[key] = {"error": str(e).splitlines()[0]}
    return out


def _predicted(prediction: dict[str, Any] | None, terms: tuple[str, ...]) -> float | None:
    if not prediction or not terms:
        return None
    parts = prediction.get("breakdown") or {}
    return sum(float(parts.get(t, 0.0)) for t in terms)


def _s(value: float | None) -> str:
    return "—" if value is None else f"{value:+.4f}"


def pair_table(
    found: dict[str, Any], mine: dict[str, Any] | None, theirs: dict[str, Any] | None
) -> tuple[list[str], list[list[str]]]:
    """(header, rows): each cause row's measured difference and the planner's."""
    measured = {t["cause"]: t["delta_s"] for t in found["terms"]}
    terms = sorted({*(mine or {}).get("breakdown", {}), *(theirs or {}).get("breakdown", {})})
    header = ["cause", "measured (s)", "predicted (s)", "planner's terms"]
    table = []
    for planner_terms, causes in cause_rows(terms or list(BREAKDOWN_CAUSES)):
        delta = sum(measured.get(c, 0.0) for c in causes)
        ours = _predicted(theirs, planner_terms)
        base = _predicted(mine, planner_terms)
        predicted = None if ours is None or base is None else ours - base
        if abs(delta) < 5e-5 and not predicted:
            continue
        name = " + ".join(f"{describe(c)} (`{c}`)" for c in causes)
        table.append([name, _s(delta), _s(predicted), ", ".join(planner_terms) or "—"])
    return header, table


def measured_block(
    rows: list[Speedup],
    baseline: str,
    found: Measured,
    predicted: Callable[[pd.Series], dict[str, Any] | None],
) -> list[str]:
    """The Why (measured) block of one speedup table; `predicted(row)` gives a job's
    recorded prediction (or None)."""
    blocks = []
    for row in rows:
        if row.yafsdp is None or row.baseline is None:
            continue
        got = found.get((str(row.yafsdp["job_label"]), str(row.baseline["job_label"])))
        if got is None:
            continue
        title = f"{point_label(row.key)}, {baseline} against yafsdp"
        if "error" in got:
            blocks.append(f"{title}: no measured why ({got['error']}).")
            continue
        timed = got["timed_difference_s"]
        lines = [
            f"{title}: traced {got['difference_s']:+.4f} s on the slowest rank's step "
            f"(timed {'n/a' if timed is None else f'{timed:+.4f} s'})."
        ]
        lines += [f"**Warning:** {w}." for w in got["warnings"]]
        lines += [f"- {line}" for side in ("b", "a") for line in got[side]["late_arrivals"]]
        blocks.append("\n".join(lines))
        blocks.append(md_table(*pair_table(got, predicted(row.yafsdp), predicted(row.baseline))))
    if not blocks:
        return ["Why (measured): no pair of these jobs has traces to compare."]
    return [
        "Why (measured, from the traces; `python -m harness.trace why <yafsdp job> "
        "<baseline job>` prints the same): the slowest rank's profiled step, the "
        "difference cause by cause, beside the planner's in the same causes:",
        *blocks,
    ]
