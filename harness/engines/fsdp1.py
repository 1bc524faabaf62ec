"""PyTorch FSDP1, configured as the published YaFSDP baseline.

FULL_SHARD per transformer layer (plus the root for embedding, norm and output),
BACKWARD_PRE prefetch, forward_prefetch, limit_all_gathers, use_orig_params, bf16
parameters and fp32 gradient reduction.
"""

from __future__ import annotations

import torch
from torch import nn

from harness.engines.base import RunContext, Wrapped, checkpoint_first_layers
from harness.init import initial_value


class FSDP1Engine:
    name = "fsdp1"

    def wrap(self, model: nn.Module, ctx: RunContext) -> Wrapped:
        from torch.distributed.fsdp import BackwardPrefetch, MixedPrecision, ShardingStrategy
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        qualified_names = {module: name for name, module in model.named_modules()}

        def materialise(module: nn.Module) -> None:
            # FSDP1 calls this on each meta submodule before flattening it; names are
            # taken from the unwrapped model so the weights equal every other engine's.
            module.to_empty(device=ctx.device, recurse=False)
            prefix = qualified_names.get(module)  # wrappers added later own no parameters
            if prefix is None:
                return
            with torch.no_grad():
                for name, param in module.named_parameters(recurse=False):
                    full = f"{prefix}.{name}" if prefix else name
                    value = initial_value(full, param.shape, ctx.seed, param.device)
                    param.copy_(value.to(param.dtype))

        precision = MixedPrecision(
            param_dtype=ctx.param_dtype, reduce_dtype=ctx.reduce_dtype, buffer_dtype=ctx.param_dtype
        )
        common = dict(
            sharding_strategy=ShardingStrategy.FULL_SHARD,
            backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
            forward_prefetch=True,
            limit_all_gathers=True,
            use_orig_params=True,
            mixed_precision=precision,
            param_init_fn=materialise,
            device_id=ctx.device,
            sync_module_states=False,
        )
        for i, layer in enumerate(model.layers):
            model.layers[i] = FSDP(layer, **common)
        checkpoint_first_layers(model.layers, ctx.ckpt_layers)
        wrapped = FSDP(model, **common)
        params = list(wrapped.parameters())

        return Wrapped(
            module=wrapped,
            params=params,
            clip_grad_norm_=wrapped.clip_grad_norm_,
            # Every micro-batch reduces (FSDP1's no_sync is a context manager the loop does
            # not use); the sum over micro-batches is still the right gradient.
            loss_scale=1.0 / ctx.grad_accum,
        )
