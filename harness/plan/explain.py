"""Why one engine's predicted step is longer than yafsdp's, in words, term by term.

Reads two predictions in their JSON form (a plan row's `breakdown`, `mechanisms`, `waits`,
as `harness.plan --json` prints them and result.json's `metrics.predicted` keeps them), so
the report can put the same lines beside measured results without importing torch.

The first line is the difference of the iteration times. The lines after it split that
difference over the compute stream's timeline (`breakdown`: the parts add up to the
difference), largest first; a line for each mechanism follows with its own cost in each
engine (the step with it, less the step without it).
"""

from __future__ import annotations

from typing import Any

# Terms shown below this share of the iteration time are folded into "other terms".
SHOWN_FRACTION = 0.005

_PART_WORDS = {
    "compute": "the model's kernels",
    "overlap slowdown": "compute slowed by overlapping NCCL kernels and side-stream kernels",
    "optimizer": "clipping and the AdamW step",
    "exposed all_gather": "compute waiting for all-gathers",
    "exposed reduce_scatter": "compute waiting for reduce-scatters",
    "exposed all_reduce": "compute waiting for all-reduces",
    "waits for the host": "compute waiting for the host (kernel launches, hooks, rate limiter)",
    "allocator retries": "compute waiting while the allocator's retries synchronise the device",
    "waits for the side stream": "compute waiting for a side stream (post-backward; v1: comm)",
    "fsdp1_flat_grad": "FSDP1's flat-gradient copies",
    "fsdp1_shard_cast": "FSDP1's casts of the fp32 shards before each gather",
    "fsdp1_grad_upcast": "FSDP1's gradient upcasts and divisions",
    "fsdp2_copy_in_out": "FSDP2's copy-in and copy-out",
    "yafsdp_buffers": "yafsdp's gradient-buffer and staging copies",
    "ya_fsdp_v1_grad_copy": "upstream YaFSDP v1's fp32 gradient copies and its one division",
    "waits for the unshard stream": "compute waiting for the unshard stream (FSDP1's cat)",
    "local_grad_cast": "the unsharded gradients' fp32 cast",
}

_MECHANISM_WORDS = {
    "rate_limiter": "rate limiter (limit_all_gathers)",
    "fsdp1_flat_grad": "flat-gradient concatenation",
    "fsdp1_grad_upcast": "gradient upcast and pre/post-divide",
    "fsdp2_copy_in_out": "copy-in and copy-out",
    "yafsdp_buffers": "gradient-buffer kernels",
    "fsdp1_cat_on_unshard": "flat-gradient cat on the unshard stream, behind the all-gathers",
    "ya_fsdp_v1_grad_copy": "fp32 gradient copy on the -1 comm stream, one division",
    "slowest_rank_per_link": "the slowest rank at every link of a chain",
    "launch_overhead": "kernel launches and hooks on the host",
    "nccl_sm_contention": "NCCL's SMs taken from overlapped compute",
    "side_stream_sharing": "side-stream kernels sharing the GPU with compute",
    "give_way": "kernels giving way to compute for the SMs",
    "slowest_rank": "collectives waiting for the slowest rank",
    "allocator_retries": "allocator retries (cache freed, device synchronised)",
}


def _s(seconds: float) -> str:
    return f"{seconds:+.3f} s"


def _count(waits: dict[str, Any] | None, part: str) -> str:
    n = (waits or {}).get(part)
    if isinstance(n, list):
        n = len(n)
    return f" ({n} units wait)" if n else ""


def why_lines(
    yafsdp: dict[str, Any], baseline: dict[str, Any], label: str, reference: str = "yafsdp"
) -> list[str]:
    """Lines saying by how much and why `label`'s step differs from `reference`'s (yafsdp's,
    or a planned program's such as the published YaFSDP's)."""
    t_y, t_b = yafsdp["iteration_time_s"], baseline["iteration_time_s"]
    diff = t_b - t_y
    lines = [f"{label} {_s(diff)} ({diff / t_b * 100:+.1f}% of its step) against {reference}"]
    parts_y, parts_b = yafsdp.get("breakdown") or {}, baseline.get("breakdown") or {}
    deltas = {k: parts_b.get(k, 0.0) - parts_y.get(k, 0.0) for k in {*parts_y, *parts_b}}
    shown, rest = [], 0.0
    for key, delta in sorted(deltas.items(), key=lambda kv: -abs(kv[1])):
        if abs(delta) < SHOWN_FRACTION * t_b:
            rest += delta
            continue
        words = _PART_WORDS.get(key, key)
        shown.append(
            f"  {_s(delta)}: {words}, {label} {parts_b.get(key, 0.0):.3f} s"
            f"{_count(baseline.get('waits'), key)} vs {reference} {parts_y.get(key, 0.0):.3f} s"
            f"{_count(yafsdp.get('waits'), key)}"
        )
    lines += shown
    if abs(rest) > 0:
        lines.append(f"  {_s(rest)}: other terms, each under {SHOWN_FRACTION:.1%} of the step")
    mech_y, mech_b = yafsdp.get("mechanisms") or {}, baseline.get("mechanisms") or {}
    for name in sorted({*mech_y, *mech_b}):
        cost_b, cost_y = mech_b.get(name), mech_y.get(name)
        if max(abs(cost_b or 0.0), abs(cost_y or 0.0)) < SHOWN_FRACTION * t_b:
            continue
        words = _MECHANISM_WORDS.get(name, name)
        own = [f"{label} {_s(cost_b)}" if cost_b is not None else None,
               f"{reference} {_s(cost_y)}" if cost_y is not None else None]  # fmt: skip
        lines.append(f"  mechanism {words}: " + ", ".join(o for o in own if o))
    for engine, row in ((label, baseline), (reference, yafsdp)):
        lines += _give_way_lines(engine, row, SHOWN_FRACTION * t_b)
    return lines


def _give_way_lines(engine: str, row: dict[str, Any], shown: float) -> list[str]:
    """The give-way terms in words: what the reduce-scatters wait behind, per unit."""
    detail, costs = row.get("give_way") or {}, row.get("mechanisms") or {}
    lines = []
    cost = costs.get("give_way")
    if cost is not None and cost >= shown and detail.get("units"):
        kernels = detail.get("chain_kernels") or []
        behind = (f"behind {' and '.join(kernels)} kernels that give way to GEMMs" if kernels
                  else "for SMs held by GEMMs")  # fmt: skip
        lines.append(
            f"  {engine} {_s(cost)}: reduce-scatters wait {behind} ({detail['units']} units x "
            f"{detail['per_unit_s'] * 1e3:.1f} ms)"
        )
    cost = costs.get("slowest_rank")
    if cost is not None and cost >= shown and detail.get("slowest_rank_collectives"):
        lines.append(
            f"  {engine} {_s(cost)}: collectives wait for the slowest rank "
            f"({detail['slowest_rank_collectives']} collectives x "
            f"{detail['slowest_rank_per_collective_s'] * 1e3:.2f} ms)"
        )
    return lines
