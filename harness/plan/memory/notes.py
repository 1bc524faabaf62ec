"""What a plan row says of its memory beside the peak: the fit verdict ("tight" is not
fitting) and the notes on the caching allocator near the device's capacity."""

from __future__ import annotations

from typing import Any

from harness.plan.memory.allocator import retry_note
from harness.plan.memory.model import NEAR_CAPACITY

GIB = 2**30
PlanRow = Any  # harness.plan.planner.PlanRow (which imports this module)


def memory_note(row: PlanRow, price: float | None) -> str | None:
    """Where the allocator's per-stream pools outgrow the device (`allocator.py`), its
    retries (`price`: what they add to the step, None where not priced); else, where the
    peak nears the device's memory, a note: fragmentation within a pool, which is not
    modelled, can make it retry there too."""
    engine, gib = row.cfg.engine.label, row.cfg.device_memory_gb
    if row.allocator is not None and (note := retry_note(engine, row.allocator, gib, price)):
        return note
    return near_capacity(row)


def fit_verdict(row: PlanRow) -> str | None:
    """The fit: "yes", "tight" (a peak at NEAR_CAPACITY of the device or more leaves too little for
    the CUDA context, NCCL's buffers and fragmentation), "NO", or None (no device memory)."""
    have = row.cfg.device_memory_gb * GIB
    if row.fits is None or not have:
        return None
    if not row.fits:
        return "NO"
    return "tight" if row.memory.peak_bytes >= NEAR_CAPACITY * have else "yes"


def near_capacity(row: PlanRow) -> str | None:
    """A note where an engine's predicted peak nears its device's memory. There the caching
    allocator frees its cache and retries an allocation, synchronising the device
    (pytorch/pytorch issue 65078 on FSDP; PR 19222): stalls the time model does not price,
    for want of a public per-retry cost. A sweep's `num_alloc_retries` shows whether they
    happen; yafsdp allocates its buffers once, but its activations still come and go."""
    have = row.cfg.device_memory_gb * GIB
    if not have or row.memory.peak_bytes < NEAR_CAPACITY * have:
        return None
    share = row.memory.peak_bytes / have
    return (
        f"  note: {row.cfg.engine.label}'s predicted peak is {share:.0%} of the "
        f"{row.cfg.device_memory_gb:g} GiB device; near capacity the caching allocator "
        "retries with device synchronisations, not priced here (see num_alloc_retries)"
    )
