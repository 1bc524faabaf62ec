"""The two collectives the engine needs, behind one shim.

torch 2.13 renamed `all_gather_into_tensor`/`reduce_scatter_tensor` to `*_single` and
deprecated the old names; older releases only have the old ones. gloo has no
reduce-scatter at all, so there it is an all-reduce of the whole input followed by taking
this rank's chunk (twice NCCL's traffic: count it that way in bytes-moved figures).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

_all_gather_flat: Callable = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_flat: Callable = (
    getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
)


def has_native_reduce_scatter(group: dist.ProcessGroup) -> bool:
    return dist.get_backend(group) != "gloo"


def all_gather(
    out: torch.Tensor, shard: torch.Tensor, group: dist.ProcessGroup, async_op: bool
) -> dist.Work | None:
    """out = concatenation of every rank's `shard`, in rank order."""
    return _all_gather_flat(out, shard, group=group, async_op=async_op)


def reduce_scatter(
    out: torch.Tensor | None,
    full: torch.Tensor,
    group: dist.ProcessGroup,
    rank: int,
    world_size: int,
    async_op: bool,
) -> tuple[dist.Work | None, torch.Tensor]:
    """Sum `full` over ranks and return this rank's chunk (a view of `full` when out is None)."""
    if out is None:
        work = dist.all_reduce(full, op=dist.ReduceOp.SUM, group=group, async_op=async_op)
        return work, full.chunk(world_size)[rank]
    work = _reduce_scatter_flat(out, full, op=dist.ReduceOp.SUM, group=group, async_op=async_op)
    return work, out


def all_reduce_sum(
    t: torch.Tensor, group: dist.ProcessGroup, async_op: bool = False
) -> dist.Work | None:
    return dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group, async_op=async_op)


class Comm:
    """The process group the engine talks over: this rank, the world size, and the three
    collectives (looked up in this module at each call, so a wrapper put in its place, as
    gpu-check's stress tests do, is used). A stand-in with the same methods lets a planner
    run the engine's schedule on the meta device and see what it would issue."""

    def __init__(self, group: dist.ProcessGroup) -> None:
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.native_reduce_scatter = has_native_reduce_scatter(group)

    def all_gather(
        self, out: torch.Tensor, shard: torch.Tensor, async_op: bool
    ) -> dist.Work | None:
        return all_gather(out, shard, self.group, async_op)

    def reduce_scatter(
        self, out: torch.Tensor | None, full: torch.Tensor, async_op: bool
    ) -> tuple[dist.Work | None, torch.Tensor]:
        return reduce_scatter(out, full, self.group, self.rank, self.world_size, async_op)

    def all_reduce_sum(self, t: torch.Tensor, async_op: bool = False) -> dist.Work | None:
        return all_reduce_sum(t, self.group, async_op)
