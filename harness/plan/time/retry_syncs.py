"""An allocator retry in a step's program: a device synchronisation where it happens.

Where the caching allocator's pools outgrow the device (`allocator.py`), `malloc` calls
`release_cached_blocks`: `synchronize_and_free_events` and `cudaFree`, which block the host
until the work queued on every stream is done (c10/cuda/CUDACachingAllocator.cpp). The
host then issues the rest of the step from an empty queue. So a retry costs what it
exposes: work in flight on other streams longer than the compute queued beside it, and
the host's lead over the GPU, lost. Both come out of the simulator (`simulate.py`) when
the host waits, at the retry, for the last operation issued on each stream: the step with
those waits less the step without, on the program's own timeline (the contention and
hand-out refinements are left out of this term: a drained queue changes them both ways,
and in one refinement pass the difference can come out below zero, which a wait cannot
cost). cudaFree's and cudaMalloc's own host time has no public figure and is not added.

A retry happens where a moment of the memory model (`memory.py`) allocates; FSDP1's
program (`fsdp1_program.py`) issues that moment's allocations with the operation named
here (`program_label`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from harness.models.unit_names import OUTPUT
from harness.plan.time.simulate import COMPUTE, STREAMS, Op, simulate
from harness.plan.time.timing import TimeEstimate

TERM = "allocator_retries"
# memory-model part -> the program's unit (`harness.models.unit_names`)
_UNITS = {"projection": OUTPUT, "loss": OUTPUT, OUTPUT: OUTPUT}


def program_label(moment: str) -> str | None:
    """The label of the operation whose issue allocates at `moment` ("backward: layers.3
    reduce" -> "grads_done.layers.3"); None for a moment no operation of FSDP1 marks."""
    phase, _, what = moment.partition(": ")
    reduce = what.endswith(" reduce")
    what = what.removesuffix(" reduce")
    unit = _UNITS.get(what, what)
    if phase == "forward" and not reduce:
        return f"forward.{unit}"
    if phase == "backward":
        return f"{'grads_done' if reduce else 'backward'}.{unit}"
    return None


def with_retry_syncs(program: list[Op], moments: Iterable[str]) -> list[Op]:
    """`program` with the host waiting for every stream just before the last operation of
    each retry's moment (the steady-state micro-batch's)."""
    labels = {label for m in moments if (label := program_label(m))}
    last: dict[str, int] = {}
    for i, op in enumerate(program):
        label = op.name.split(":", 1)[-1]
        if label in labels:
            last[label] = i
    targets = set(last.values())
    out: list[Op] = []
    latest: dict[str, str] = {}  # stream -> its last operation issued so far
    for i, op in enumerate(program):
        if i in targets:
            waits = tuple(latest[s] for s in STREAMS if s in latest)
            out.append(Op(name=f"retry:{op.name}", stream=COMPUTE, seconds=0.0, term=TERM,
                          host_waits=waits, unit=op.unit))  # fmt: skip
        out.append(op)
        latest[op.stream] = op.name
    return out


def exposed_s(program: list[Op], moments: Iterable[str]) -> float:
    """The step's time with a device synchronisation at each retry, less without."""
    return simulate(with_retry_syncs(program, moments)).total - simulate(program).total


def with_retry_term(estimate: TimeEstimate, price_s: float) -> TimeEstimate:
    """The estimate with the retries' cost as a term: the compute stream waits for the
    host, which waits for the device."""
    total = estimate.iteration_time_s + price_s
    scale = estimate.iteration_time_s / total
    return replace(
        estimate,
        iteration_time_s=total,
        stall_s=estimate.stall_s + price_s,
        tokens_per_s=estimate.tokens_per_s * scale,
        mfu=estimate.mfu * scale,
        breakdown={**estimate.breakdown, "allocator retries": price_s},
        mechanisms={**estimate.mechanisms, TERM: price_s},
    )
