"""Every tensor the engine owns, allocated once: parameters and gradients are views into it.

Unsharded weights: the buffers of the `BufferPlan` (two sized to the largest unit, unit i
using buffer i % 2; or the first and last units sharing one and the others alternating two
layer-sized ones) and one for the resident unit (norm weights, parameters outside every
unit). Unsharded gradients: the same shapes, in the param dtype. Sharded state: one flat
fp32 master tensor per group (units, resident) with a preallocated fp32 grad, plus its
param-dtype copy that feeds the all-gathers. The optimizer sees one flat parameter per
unit, each a view of the flat master: a non-fused optimizer's temporaries are then bounded
by one unit's shard, not by the whole shard. Staging: one reduce-dtype copy of a gradient
buffer (or of a chunk of it, for a unit larger than the staging) that the reduce-scatter
reads, so that the gradient buffer is free again as soon as it is copied (one reduce-
scatter is in flight at a time through it; it has the next unit's backward to finish;
weight buffers that backward has passed lend staging-sized lanes for more, see schedule).
"""

from __future__ import annotations

import torch
from torch import nn

from yafsdp_impl._layout import Layout, UnitLayout
from yafsdp_impl._plan import BufferPlan


class Buffers:
    def __init__(
        self,
        layout: Layout,
        plan: BufferPlan,
        *,
        device: torch.device,
        param_dtype: torch.dtype,
        reduce_dtype: torch.dtype,
        native_reduce_scatter: bool,
    ) -> None:
        res = layout.resident.padded_numel
        self.device = device
        self.plan = plan
        self.buffer_of = plan.buffer_of  # unit -> weight (and gradient) buffer
        empty = lambda n, dt: torch.zeros(n, dtype=dt, device=device)  # noqa: E731
        self.weight = [empty(n, param_dtype) for n in plan.buffer_numel]
        self.grad = [empty(n, param_dtype) for n in plan.buffer_numel]
        self.resident_weight = empty(res, param_dtype)
        self.resident_grad = empty(res, param_dtype)

        self.master = empty(layout.master_numel, torch.float32)
        self.resident_master = empty(layout.resident.shard_numel, torch.float32)
        self.master_grad = empty(layout.master_numel, torch.float32)
        self.resident_master_grad = empty(layout.resident.shard_numel, torch.float32)
        pieces = [(self.master, self.master_grad, self.master_shard(u)) for u in layout.units]
        pieces.append((self.resident_master, self.resident_master_grad, slice(0, None)))
        self.master_params = [nn.Parameter(_alias(m, sl.start, m[sl].shape)) for m, _, sl in pieces]
        self._master_grad_views = [g[sl] for _, g, sl in pieces]
        self.attach_master_grads()

        # The all-gather input; with an fp32 param dtype the master itself serves.
        same = param_dtype == torch.float32
        self.gather_source = self.master if same else empty(layout.master_numel, param_dtype)
        self.resident_gather_source = (
            self.resident_master if same else empty(layout.resident.shard_numel, param_dtype)
        )

        self.staging = empty(plan.staging_numel, reduce_dtype)
        # The resident unit's gradients accumulate here across micro-batches, reduced once.
        self.resident_staging = empty(res, reduce_dtype)
        chunk = plan.staging_numel // layout.resident.world_size
        # This rank's summed chunk of a reduce-scatter (gloo returns a view of its input).
        self.reduced = empty(chunk, reduce_dtype) if native_reduce_scatter else None
        self.resident_reduced = (
            empty(layout.resident.shard_numel, reduce_dtype) if native_reduce_scatter else None
        )

    def attach_master_grads(self) -> None:
        """Put the preallocated grads back (an optimizer's zero_grad may have set them to None)."""
        for p, g in zip(self.master_params, self._master_grad_views, strict=True):
            if p.grad is not g:
                p.grad = g

    def master_shard(self, unit: UnitLayout) -> slice:
        return slice(unit.master_offset, unit.master_offset + unit.shard_numel)

    def bytes_by_class(self) -> dict[str, int]:
        nbytes = lambda ts: sum(t.numel() * t.element_size() for t in ts)  # noqa: E731
        staging = [self.staging, self.resident_staging]
        if self.reduced is not None:
            staging += [t for t in (self.reduced, self.resident_reduced) if t is not None]
        if self.gather_source is not self.master:
            staging += [self.gather_source, self.resident_gather_source]
        return {
            "weights": nbytes([*self.weight, self.resident_weight]),
            "grads": nbytes([*self.grad, self.resident_grad]),
            "master": nbytes(
                [self.master, self.resident_master, self.master_grad, self.resident_master_grad]
            ),
            "staging": nbytes(staging),
        }


def bind_views(
    unit: UnitLayout, weight: torch.Tensor, grad: torch.Tensor
) -> list[tuple[nn.Parameter, torch.Tensor]]:
    """Replace the unit's parameters by views into `weight`, with `.grad` views into `grad`.

    Autograd then accumulates each gradient in place into its slice of `grad`.
    """
    params = []
    for s in unit.slots:
        param = nn.Parameter(_alias(weight, s.offset, s.shape))
        param.grad = grad[s.offset : s.offset + s.numel].view(s.shape)
        s.module._parameters[s.attr] = param
        params.append((param, param.grad))
    return params


def _alias(base: torch.Tensor, offset: int, shape: torch.Size) -> torch.Tensor:
    """A tensor on `base`'s memory with a version counter of its own.

    A plain view shares the base's counter, so refilling the buffer (which is the point of
    it) would make autograd reject the weights it saved for backward.
    """
    t = torch.empty(0, dtype=base.dtype, device=base.device)
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):  # contiguous, as the buffer's slices are
        strides[i] = strides[i + 1] * shape[i + 1]
    t.set_(base.untyped_storage(), base.storage_offset() + offset, shape, strides)
    return t
