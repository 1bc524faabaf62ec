"""The caching allocator's reserved memory and its retries, from its own rules.

torch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp @001074d):
- "Allocations are associated with a stream. Once freed, blocks can be re-allocated on the
  same stream, but not on any other stream" (`get_free_block` refuses a cached block
  whose `stream` differs). Each stream's pool therefore grows to that stream's own peak
  and keeps it cached: reserved memory is at least the sum of the streams' peaks, while
  allocated memory peaks at the largest sum at one moment.
- A block freed while recorded on another stream (`recordStream`) is returned to its
  pool only when that stream's work is done (`insert_events`); the memory model already
  holds such blocks while their reduce-scatter runs.
- When `cudaMalloc` fails, `malloc` frees the cached blocks of every stream
  (`release_cached_blocks`: `synchronize_and_free_events`, then `cudaFree` of each
  unsplit cached segment) and tries again; that second attempt is what
  `num_alloc_retries` counts. The pools shrink to what is in use and grow again.

FSDP1 allocates on three streams (torch/distributed/fsdp/_runtime_utils.py): `_unshard`
gathers each unit's padded flat parameter under `stream(unshard_stream)`;
`_post_backward_hook` casts the gradient to the reduce dtype and allocates the
reduce-scatter output under `stream(_post_backward_stream)`, and records the compute
stream's gradient on it; everything autograd makes is on the compute stream. yafsdp and
`local` allocate on the compute stream only (yafsdp's buffers once, at construction).
FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py, 2.4 on): `foreach_all_gather`
allocates a group's all-gather output under `stream(all_gather_copy_in_stream)`, and
`foreach_all_gather_copy_out` copies it into the unsharded parameters on the compute stream:
the memory model holds the two copies as one (`unsharded_weights`), so for the pools its
bytes are counted on the compute stream and mirrored on the copy-in stream (`MIRRORED`:
reserved, never allocated at one moment twice). `foreach_reduce` allocates the
reduce-scatter input and output under `stream(reduce_scatter_stream)` (`staging`).

What is not derived: fragmentation within one stream's pool (blocks of unequal sizes).
A retry blocks the host until every stream's queued work is done: the time model prices
it as the in-flight work that exposes (`retry_syncs.py`, the `allocator_retries`
mechanism); cudaFree's and cudaMalloc's own host time has no public figure and is left out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

COMPUTE = "compute"
# engine -> {memory class: the stream its bytes are allocated on}; other classes: compute
STREAM_OF_CLASS: dict[str, dict[str, str]] = {
    "fsdp1": {"unsharded_weights": "unshard", "staging": "post_backward"},
    "yafsdp": {},
    "local": {},
    "fsdp2": {"staging": "reduce_scatter"},
    "fsdp2_tuned": {"staging": "reduce_scatter"},
}
# engine -> {memory class: a second stream whose pool also holds a copy of its bytes}
MIRRORED: dict[str, dict[str, str]] = {
    "fsdp2": {"unsharded_weights": "all_gather_copy_in"},
    "fsdp2_tuned": {"unsharded_weights": "all_gather_copy_in"},
}
OUTSIDE = ("overhead",)  # held beside the allocator, in no pool
STEADY_PASSES = 2  # the pools carry over from one step to the next: count the second


@dataclass(frozen=True)
class AllocatorEstimate:
    reserved_bytes: int  # the steady-state step's largest reserved, outside memory included
    allocated_peak_bytes: int  # the largest sum at one moment, outside memory included
    stream_peaks: dict[str, int]  # each stream's own largest demand
    retries_per_step: int  # at least: one per moment whose growth found the device full
    retry_moments: tuple[str, ...]
    fits: bool  # the allocated peak fits the device (else no retry helps: out of memory)

    def to_dict(self) -> dict[str, object]:
        return {
            "reserved_bytes": self.reserved_bytes,
            "allocated_peak_bytes": self.allocated_peak_bytes,
            "stream_peaks": self.stream_peaks,
            "retries_per_step": self.retries_per_step,
            "retry_moments": list(self.retry_moments),
        }


def stream_demand(
    by_class: dict[str, int], engine: str, *, mirrored: bool = False
) -> dict[str, int]:
    """The bytes in use on each stream at one moment (with `mirrored`, the copies
    `MIRRORED` adds to a second stream's pool as well)."""
    streams = STREAM_OF_CLASS[engine]
    out: dict[str, int] = {}
    for cls, nbytes in by_class.items():
        if cls in OUTSIDE:
            continue
        stream = streams.get(cls, COMPUTE)
        out[stream] = out.get(stream, 0) + nbytes
        if mirrored and (copy := MIRRORED.get(engine, {}).get(cls)):
            out[copy] = out.get(copy, 0) + nbytes
    return out


def run_pools(
    demands: list[tuple[str, dict[str, int]]], capacity: int | None
) -> tuple[int, list[str]]:
    """Each stream's pool over the step's moments, `STEADY_PASSES` steps in a row: a pool
    grows to its stream's demand and keeps it; where growing would pass `capacity`, every
    pool first shrinks to what its stream uses now (a retry). Returns the last step's
    largest reserved and the moments that retried."""
    reserved: dict[str, int] = {}
    peak, retries = 0, list[str]()
    for step in range(STEADY_PASSES):
        last = step == STEADY_PASSES - 1
        for moment, used in demands:
            for stream, need in used.items():
                if need <= reserved.get(stream, 0):
                    continue
                others = sum(v for k, v in reserved.items() if k != stream)
                if capacity is not None and others + need > capacity:
                    reserved = {k: used.get(k, 0) for k in reserved}
                    if last and (not retries or retries[-1] != moment):
                        retries.append(moment)
                reserved[stream] = need
            if last:
                peak = max(peak, sum(reserved.values()))
    return peak, retries


def estimate_allocator(
    moments: dict[str, dict[str, int]], engine: str, device_bytes: int | None
) -> AllocatorEstimate | None:
    """The allocator's view of a step whose moments hold `moments` bytes by class; None
    for an engine whose streams are not derived here."""
    if engine not in STREAM_OF_CLASS:
        return None
    outside = max((sum(m.get(c, 0) for c in OUTSIDE) for m in moments.values()), default=0)
    allocated = max(sum(stream_demand(m, engine).values()) for m in moments.values())
    demands = [(name, stream_demand(m, engine, mirrored=True)) for name, m in moments.items()]
    peaks = _peaks(d for _, d in demands)
    fits = device_bytes is None or allocated + outside <= device_bytes
    capacity = device_bytes - outside if device_bytes is not None and fits else None
    reserved, retries = run_pools(demands, capacity)
    return AllocatorEstimate(reserved + outside, allocated + outside, peaks, len(retries),
                             tuple(retries), fits)  # fmt: skip


def _peaks(demands: Iterable[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in demands:
        for stream, nbytes in d.items():
            out[stream] = max(out.get(stream, 0), nbytes)
    return out


def retry_note(
    engine: str, estimate: AllocatorEstimate, device_gib: float, price_s: float | None
) -> str | None:
    """A why-line where the allocator is predicted to retry; `price_s`: what the retries'
    synchronisations add to the step (`retry_syncs.py`), None where not priced."""
    if not estimate.retries_per_step:
        return None
    gib = 2**30
    pools = ", ".join(f"{s} {b / gib:.1f}" for s, b in estimate.stream_peaks.items())
    return (
        f"  note: {engine} reserves {estimate.reserved_bytes / gib:.1f} GiB by its streams' "
        f"pools ({pools} GiB; allocated peak {estimate.allocated_peak_bytes / gib:.1f}) "
        f"against {device_gib:g} GiB: at least {estimate.retries_per_step} allocator "
        f"retries a step (first at {estimate.retry_moments[0]}), each freeing the cache "
        "with a device synchronisation"
        + (
            f": {price_s:+.3f} s a step, the in-flight work they expose"
            if price_s is not None
            else "; not priced here"
        )
    )
