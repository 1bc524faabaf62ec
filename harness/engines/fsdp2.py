"""PyTorch FSDP2 (`fully_shard`) per transformer layer plus the root.

Default: the stock behaviour. With `async_unshard: true` (label fsdp2_tuned) the
all-gathers are issued asynchronously and the next layer is prefetched explicitly in
forward and backward, which on CPU/gloo is what lets communication overlap compute at
all (FSDP2's streams are no-ops there, so the default issues collectives synchronously).
"""

from __future__ import annotations

import torch
from torch import nn

from harness.engines.base import RunContext, Wrapped, checkpoint_first_layers
from harness.init import init_weights


class FSDP2Engine:
    name = "fsdp2"

    def wrap(self, model: nn.Module, ctx: RunContext) -> Wrapped:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
        policy = MixedPrecisionPolicy(param_dtype=ctx.param_dtype, reduce_dtype=ctx.reduce_dtype)
        checkpoint_first_layers(model.layers, ctx.ckpt_layers)
        for layer in model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        model.to_empty(device=ctx.device)
        init_weights(model, ctx.seed)
        if ctx.cfg.async_unshard:
            # A private switch in torch 2.6+; the tuned variant cannot exist without it.
            model._set_unshard_async_op(True)
            prefetch_neighbours(list(model.layers))

        params = list(model.parameters())
        return Wrapped(
            module=model,
            params=params,
            clip_grad_norm_=lambda max_norm: torch.nn.utils.clip_grad_norm_(params, max_norm),
            loss_scale=1.0 / ctx.grad_accum,
            before_micro_batch=lambda i: model.set_requires_gradient_sync(i == ctx.grad_accum - 1),
        )


def prefetch_neighbours(layers: list[nn.Module]) -> None:
    """Explicit prefetch: forward unshards layer i+1 during layer i, backward layer i-1."""
    for i, layer in enumerate(layers):
        if i + 1 < len(layers):
            layer.set_modules_to_forward_prefetch([layers[i + 1]])
        if i > 0:
            layer.set_modules_to_backward_prefetch([layers[i - 1]])
