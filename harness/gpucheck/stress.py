"""Suite A's instruments: sleeps on a chosen CUDA stream, collectives that poison their
output first, and delayed writes to the buffers that collectives read.

The context managers replace functions of the engine's private `yafsdp_impl._collectives`
(the engine calls them through that module) and restore them on exit;
`slow_guarded_writes` replaces two methods of one engine instance for good, so use it on an
engine built for the check.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

import yafsdp_impl._collectives as collectives  # the engine calls them through it
from harness.rank.faults import cycles_per_second
from harness.rank.session import Session

__all__ = ["cycles_per_second"]  # suite A's clock, measured as a delay fault measures it


@contextmanager
def poisoned_collectives(sleep_cycles: int) -> Iterator[None]:
    """Every all-gather and reduce-scatter first fills its output with NaN and sleeps on
    the communication stream, then runs: compute that does not wait for it reads NaN."""
    gather, scatter = collectives.all_gather, collectives.reduce_scatter

    def slow_gather(out, shard, group, async_op):
        out.fill_(float("nan"))
        torch.cuda._sleep(sleep_cycles)
        return gather(out, shard, group, async_op)

    def slow_scatter(out, full, group, rank, world_size, async_op):
        if out is not None:
            out.fill_(float("nan"))
        torch.cuda._sleep(sleep_cycles)
        return scatter(out, full, group, rank, world_size, async_op)

    collectives.all_gather, collectives.reduce_scatter = slow_gather, slow_scatter
    try:
        yield
    finally:
        collectives.all_gather, collectives.reduce_scatter = gather, scatter


def slow_guarded_writes(engine: Any, sleep_cycles: int) -> None:
    """Before the compute stream writes the param-dtype master copy and the staging lanes
    (both read by collectives), fill them with NaN and sleep: a collective that does not
    wait for those writes gathers or reduces NaN."""
    schedule = engine.schedule
    copy, reduce_scatter = schedule.copy_master_to_param_dtype, schedule._reduce_scatter

    def slow_copy(part: str = "all") -> None:
        # only this part's copy: the other part's may be read by gathers in flight
        for dst, _src in schedule.param_copy_slices(part):  # none with fp32 weights
            dst.fill_(float("nan"))
        torch.cuda._sleep(sleep_cycles)
        copy(part)

    def slow_reduce_scatter(i: int) -> None:
        while schedule.in_flight:  # every staging lane has finished being read
            schedule._finish_oldest_reduce_scatter()
        for lane in schedule.lanes:  # the staging buffer and any lent weight buffer
            lane.full.fill_(float("nan"))
        torch.cuda._sleep(sleep_cycles)
        reduce_scatter(i)

    schedule.copy_master_to_param_dtype, schedule._reduce_scatter = slow_copy, slow_reduce_scatter


@contextmanager
def delayed_forward_gathers(sleep_cycles: int) -> Iterator[None]:
    """Sleep on the communication stream before every all-gather issued in forward."""
    gather = collectives.all_gather

    def slow(out, shard, group, async_op):
        if torch._C._current_graph_task_id() == -1:  # not inside backward
            torch.cuda._sleep(sleep_cycles)
        return gather(out, shard, group, async_op)

    collectives.all_gather = slow
    try:
        yield
    finally:
        collectives.all_gather = gather


def yafsdp_of(t: Session) -> Any:
    """The YaFSDP object behind the adapter (its memory_report is a bound method)."""
    bound: Any = t.wrapped.memory_breakdown
    return bound.__self__
