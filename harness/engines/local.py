"""The unsharded reference: the whole model on every rank, gradients all-reduced in fp32.

With one rank it is plain single-device training; with more it is the data-parallel
limit a sharded engine is measured against (same per-rank batch and threads). Like the
sharded engines it keeps fp32 master weights and computes with a param_dtype copy that is
refreshed once per step, so all engines do the same arithmetic.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from harness.engines.base import RunContext, Wrapped, clip_grad_norm, dtype_name
from harness.models.init_weights import init_weights


class LocalEngine:
    name = "local"

    def wrap(self, model: nn.Module, ctx: RunContext) -> Wrapped:
        model.to_empty(device=ctx.device)
        init_weights(model, ctx.seed)
        working = [p for p in model.parameters() if p.requires_grad]
        masters = [p.detach().clone().requires_grad_(True) for p in working]
        model.to(ctx.param_dtype)
        working = [p for p in model.parameters() if p.requires_grad]

        @torch.no_grad()
        def after_backward() -> None:
            for w, m in zip(working, masters, strict=True):
                if w.grad is not None:
                    m.grad = w.grad.float() if m.grad is None else m.grad.copy_(w.grad)
                    w.grad = None
            if ctx.world_size > 1:
                all_reduce_mean([m.grad for m in masters if m.grad is not None], ctx.world_size)

        @torch.no_grad()
        def after_step() -> None:
            for w, m in zip(working, masters, strict=True):
                w.copy_(m)

        return Wrapped(
            module=model,
            params=masters,
            clip_grad_norm_=lambda max_norm: clip_grad_norm(masters, max_norm),
            loss_scale=1.0 / ctx.grad_accum,
            after_backward=after_backward,
            after_step=after_step,
            settings={
                "param_dtype": dtype_name(ctx.param_dtype),
                "reduce_dtype": "float32",
                "gradient_sync": "one all-reduce of flat fp32 gradients per step",
                "clip": "get_total_norm(foreach) + clip_grads_with_norm_ over fp32 masters",
            },
        )


@torch.no_grad()
def all_reduce_mean(grads: list[torch.Tensor], world_size: int) -> None:
    """Average gradients over ranks with one fp32 all-reduce of a flat buffer."""
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world_size
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()
