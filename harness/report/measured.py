"""Why (measured): under each speedup table, the traced difference of the matched jobs, cause
by cause, beside the planner's prediction in the same cause names.

`PLANNER_CAUSES` is the one table that says which measured causes (`harness.trace.diagnose.causes`)
each of the planner's terms predicts: its breakdown's parts (`harness.plan.time.timing`) and its
mechanisms (`harness.plan.time.mechanisms`). A table row joins the planner's terms and the
causes they share, so a reader sees where the model and the measurement part; causes the
planner does not model (a late rank, a slow collective) are rows of their own.
No torch, and no trace parsed here: `why` reads the two jobs' records, the traced one cached
beside their trace summaries (`harness.trace.jobs`), which the results table's pool computed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from harness.report.markdown import md_table
from harness.report.matching import point_label
from harness.report.speedups import Speedup
from harness.trace.diagnose import causes as C
from harness.trace.diagnose.ranks import SKEW
from harness.trace.diagnose.why import WhyError, describe
from harness.trace.jobs import why
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
    "slowest_rank_per_link": (SKEW,),  # the same, link by link along a collective's chain
    # FSDP1's gradient cat runs on the unshard stream: its kernels are the engine's, and
    # compute waits for that stream (the all-gathers queued there) before the next prefetch
    "fsdp1_cat_on_unshard": (C.ENGINE,),
    "waits for the unshard stream": (C.COMM_ALL_GATHER, C.ENGINE),
    "ya_fsdp_v1_grad_copy": (C.ENGINE,),  # the published program's fp32 gradient copy
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


def compared_pair(row: Speedup) -> tuple[pd.Series, pd.Series] | None:
    """The runs the measured why explains: the median pair of the cell's repeats (the
    speedup the cell averages is theirs), else the representative runs."""
    if row.median_pair is not None:
        return row.median_pair
    if row.yafsdp is None or row.baseline is None:
        return None
    return row.yafsdp, row.baseline


def _key(pair: tuple[pd.Series, pd.Series]) -> tuple[str, str]:
    return str(pair[0]["job_label"]), str(pair[1]["job_label"])


def measured_comparisons(rows: list[Speedup]) -> Measured:
    """`why` of every row's median pair (baseline against yafsdp), keyed by their job
    labels; a pair that cannot be compared holds {'error': one line}."""
    out: Measured = {}
    for row in rows:
        pair = compared_pair(row)
        if pair is None:
            continue
        try:
            out[_key(pair)] = why(job_path(pair[0]), job_path(pair[1]))
        except (WhyError, TraceError, OSError, ValueError) as e:
            out[_key(pair)] = {"error": str(e).splitlines()[0]}
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


def _repeat(job: pd.Series) -> int:
    value = job.get("repeat")
    return int(value) if isinstance(value, (int, float)) and value == value else 0


def pair_title(row: Speedup, baseline: str, pair: tuple[pd.Series, pd.Series]) -> str:
    """`llama_mini, 2 GPUs, seq 256, ckpt 0, fsdp1 against yafsdp: the median of 3 pairs,
    repeat 1 (`<yafsdp job>`, `<fsdp1 job>`)`."""
    mine, theirs = pair
    which = f"the median of {row.pairs} pairs, " if row.pairs > 1 else "its one pair, "
    repeats = {_repeat(mine), _repeat(theirs)}
    rep = (
        f"repeat {_repeat(mine)}"
        if len(repeats) == 1
        else "repeats " + "/".join(str(_repeat(j)) for j in pair)
    )
    jobs = f"`{mine['job_label']}`, `{theirs['job_label']}`"
    return f"{point_label(row.key)}, {baseline} against yafsdp: {which}{rep} ({jobs})"


def _disagreement(got: dict[str, Any]) -> str | None:
    """One sentence where the traces cannot explain the timing: another sign, or a traced
    step far from its timed median."""
    bad = [w for w in got["warnings"] if "another sign" in w or "differs from the timed" in w]
    if not bad:
        return None
    timed = got["timed_difference_s"]
    return (
        f"the traces do not explain the timing here (traced {got['difference_s']:+.4f} s, "
        f"timed {'n/a' if timed is None else f'{timed:+.4f} s'}; {bad[0]}), so no cause is "
        "named; rerun the pair on a quiet machine"
    )


def _skew_lines(got: dict[str, Any], seen: set[str]) -> list[str]:
    """Each job's late arrivals, named by engine and rank, once per job in the report."""
    out = []
    for side in ("a", "b"):
        job = got[side]
        if job["job_dir"] in seen or not job["late_arrivals"]:
            continue
        seen.add(job["job_dir"])
        out += [f"- {job['label']}: {line.removeprefix('skew: ')}" for line in job["late_arrivals"]]
    return out


def pair_block(
    got: dict[str, Any], title: str, table: tuple[list[str], list[list[str]]], seen: set[str]
) -> str:
    """One pair's why: its top three causes a line each, the rest folded in <details>."""
    timed = got["timed_difference_s"]
    head = (
        f"{title}: traced {got['difference_s']:+.4f} s on the slowest rank's step "
        f"(timed {'n/a' if timed is None else f'{timed:+.4f} s'})"
    )
    top = sorted(table[1], key=lambda r: -abs(float(r[1])))
    lines = [head + ", largest causes:"]
    lines += [f"- {r[1]} s {r[0]}" + (f" (planner {r[2]} s)" if r[2] != "—" else "")
              for r in top[:3]]  # fmt: skip
    folded = [md_table(*table), *_skew_lines(got, seen)]
    folded += [f"- note: {w}" for w in got["warnings"]]
    lines += ["", "<details><summary>every cause, late ranks and notes</summary>", "",
              "\n\n".join(folded), "", "</details>"]  # fmt: skip
    return "\n".join(lines)


def measured_block(
    rows: list[Speedup],
    baseline: str,
    found: Measured,
    predicted: Callable[[pd.Series], dict[str, Any] | None],
    seen: set[str] | None = None,
) -> list[str]:
    """The Why (measured) block of one speedup table; `predicted(row)` gives a job's
    recorded prediction (or None); `seen`: jobs whose late ranks an earlier block named."""
    seen = set() if seen is None else seen
    blocks = []
    for row in rows:
        pair = compared_pair(row)
        got = None if pair is None else found.get(_key(pair))
        if pair is None or got is None:
            continue
        title = pair_title(row, baseline, pair)
        if "error" in got:
            blocks.append(f"{title}: no measured why ({got['error']}).")
            continue
        disagree = _disagreement(got)
        if disagree is not None:
            blocks.append(f"{title}: {disagree}.")
            continue
        table = pair_table(got, predicted(pair[0]), predicted(pair[1]))
        blocks.append(pair_block(got, title, table, seen))
    if not blocks:
        return ["Why (measured): no pair of these jobs has traces to compare."]
    return [
        "Why (measured, from the traces of the pair whose speedup is the median of the "
        "cell's; `python -m harness.trace why <yafsdp job> <baseline job>` prints the same):",
        *blocks,
    ]
