"""PyTorch FSDP1, configured as the published YaFSDP comparison ran it.

That comparison launched the HF Trainer through accelerate 0.27.0 (patched) with
yandex/YaFSDP's `examples/fsdp_config.yaml`; its patched `run_clm.py` built the FSDP plugin.

| setting | value | source |
| --- | --- | --- |
| sharding_strategy | FULL_SHARD | `examples/fsdp_config.yaml` `fsdp_sharding_strategy` |
| units (auto-wrap) | token embedding, each block, output projection; the root keeps the final norm (on an HF model: `model.embed_tokens`, each decoder layer, `lm_head`) | `patches/transformers.diff` (`run_clm.py`): `lambda_auto_wrap_policy` on `embed_tokens`, `layers`, `lm_head`; accelerate's `transformer_auto_wrap_policy` names the decoder-layer class |
| backward_prefetch | BACKWARD_PRE | `fsdp_config.yaml` `fsdp_backward_prefetch` |
| forward_prefetch | True | `fsdp_config.yaml` `fsdp_forward_prefetch` |
| limit_all_gathers | True | accelerate 0.27.0 `FullyShardedDataParallelPlugin.limit_all_gathers` default (`utils/dataclasses.py`) |
| use_orig_params | False | `fsdp_config.yaml` `fsdp_use_orig_params` |
| sync_module_states | True on GPU; False on CPU, where FSDP1 refuses it (an init-time broadcast, never in the timed step, and every rank initialises identical weights anyway) | `fsdp_config.yaml` `fsdp_sync_module_states` |
| mixed_precision | param bf16 (job dtype), reduce fp32, buffer None | `run_clm.py` patch: `MixedPrecision(param_dtype=bf16, reduce_dtype=float32, buffer_dtype=None)`. Plain accelerate 0.27 `mixed_precision: bf16` would have given reduce bf16 (`set_mixed_precision`), but it only fills an unset policy, and the patch sets one |
| activation checkpointing | `checkpoint_wrapper` (non-reentrant) inside the FSDP unit | accelerate applies it to the modules under FSDP, so the unit is FSDP(checkpoint(module)) |
| clipping | `FullyShardedDataParallel.clip_grad_norm_` | what the HF Trainer calls on an FSDP model (`max_grad_norm` default 1.0) |
| gradient accumulation | reduce-scatter every micro-batch | this project's fairness rule |
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

from harness.engines.base import RunContext, Wrapped, canonical_module_name, dtype_name
from harness.models.build import decoder_parts
from harness.models.init_weights import initial_value


class FSDP1Engine:
    name = "fsdp1"

    def wrap(self, model: nn.Module, ctx: RunContext) -> Wrapped:
        from torch.distributed.fsdp import BackwardPrefetch, MixedPrecision, ShardingStrategy
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy

        qualified_names = {module: name for name, module in model.named_modules()}
        parts = decoder_parts(model)
        layer_class = parts.layer_class  # read before wrapping: FSDP replaces the layers
        units = [parts.embed, *parts.layers, parts.head]
        unit_ids = {id(m) for m in units}

        # FSDP1 broadcasts rank 0's weights at init only for GPU modules.
        sync_module_states = ctx.device.type == "cuda"
        precision = MixedPrecision(
            param_dtype=ctx.param_dtype, reduce_dtype=ctx.reduce_dtype, buffer_dtype=None
        )
        wrapped = FSDP(
            model,
            auto_wrap_policy=functools.partial(
                lambda_auto_wrap_policy, lambda_fn=lambda m: id(m) in unit_ids
            ),
            sharding_strategy=ShardingStrategy.FULL_SHARD,
            backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
            forward_prefetch=True,
            limit_all_gathers=True,
            use_orig_params=False,
            mixed_precision=precision,
            param_init_fn=_materialiser(qualified_names, ctx),
            device_id=ctx.device,
            sync_module_states=sync_module_states,
        )
        params = list(wrapped.parameters())

        return Wrapped(
            module=wrapped,
            params=params,
            clip_grad_norm_=wrapped.clip_grad_norm_,
            # Every micro-batch reduces (FSDP1's no_sync is a context manager the loop does
            # not use); the sum over micro-batches is still the right gradient.
            loss_scale=1.0 / ctx.grad_accum,
            settings=_settings(
                wrapped, ctx, [qualified_names[m] for m in units], layer_class, sync_module_states
            ),
        )


def _materialiser(qualified_names: dict[nn.Module, str], ctx: RunContext) -> Any:
    """FSDP1's param_init_fn: it is called on each meta submodule before flattening it;
    names are taken from the unwrapped model so the weights equal every other engine's."""

    def materialise(module: nn.Module) -> None:
        module.to_empty(device=ctx.device, recurse=False)
        prefix = qualified_names.get(module)  # wrappers added later own no parameters
        if prefix is None:
            return
        with torch.no_grad():
            for name, param in module.named_parameters(recurse=False):
                full = f"{prefix}.{name}" if prefix else name
                value = initial_value(full, param.shape, ctx.seed, param.device)
                param.copy_(value.to(param.dtype))

    return materialise


def _settings(
    wrapped: Any, ctx: RunContext, unit_names: list[str], layer_class: str, sync_module_states: bool
) -> dict[str, Any]:
    """What the job ran FSDP1 with, for the report's settings table."""
    return {
        "units": [canonical_module_name(n) for n in unit_names] + ["<root>"],
        # accelerate's transformer_auto_wrap_policy names the decoder-layer class;
        # the published patch adds the embedding and the output projection as units.
        "auto_wrap": f"token embedding, each {layer_class}, output projection",
        # What FSDP1 runs: at world size 1 it switches FULL_SHARD to NO_SHARD.
        "sharding_strategy": wrapped.sharding_strategy.name,
        "use_orig_params": False,
        "backward_prefetch": "BACKWARD_PRE",
        "forward_prefetch": True,
        "limit_all_gathers": True,
        "sync_module_states": sync_module_states,
        "param_dtype": dtype_name(ctx.param_dtype),
        "reduce_dtype": dtype_name(ctx.reduce_dtype),
        "buffer_dtype": None,
        "gradient_sync": "every micro-batch",
        "clip": "FullyShardedDataParallel.clip_grad_norm_",
    }
