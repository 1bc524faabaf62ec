"""PyTorch FSDP2 (`fully_shard`), grouped as torchtitan groups a Llama.

| setting | value | source |
| --- | --- | --- |
| groups | `tok_embeddings`; each block; `[norm, output]`; the root (owns nothing else); on an HF model `model.embed_tokens`, each of `model.layers`, `[model.norm, lm_head]` | torchtitan `torchtitan/distributed/fsdp.py` `apply_fsdp_to_decoder` |
| reshard_after_forward | True for the embedding and the blocks, False for `[norm, output]` (backward needs them at once) | same, policy "default" without pipeline parallelism |
| mp_policy | param_dtype = job dtype, reduce_dtype = engine.reduce_dtype (fp32), cast_forward_inputs=False | same |
| activation checkpointing | `checkpoint_wrapper(block)` (non-reentrant) before `fully_shard` | torchtitan `models/llama3/parallelize.py`: AC, then FSDP |
| gradient division | FSDP2's default mean over ranks, loss scaled by 1/grad_accum | torchtitan divides by global tokens itself (`set_gradient_divide_factor(1.0)`); the same arithmetic for a fixed-length batch |
| gradient accumulation | reduce-scatter every micro-batch (as the published engines); `sync_every_micro_batch=false` keeps unsharded grads and reduces once | this project's fairness rule |
| clipping | `get_total_norm` (foreach) over DTensor grads, `full_tensor()`, `clip_grads_with_norm_` | torchtitan `distributed/utils.py` `clip_grad_norm_` |
| prefetch | implicit (default); `async_unshard` (fsdp2_tuned): async all-gather and explicit prefetch embedding -> block 0 -> ... -> `[norm, output]` forward, reverse in backward | torchtitan's explicit-prefetch chain (used there with expert parallelism) |

On CPU FSDP2's streams are no-ops, so the default issues its collectives synchronously; the
tuned variant is what lets communication overlap compute there at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from torch import nn

if TYPE_CHECKING:
    import torch
    from torch.distributed.fsdp import FSDPModule

from harness.engines.base import (
    RunContext,
    Wrapped,
    canonical_module_name,
    clip_grad_norm,
    dtype_name,
)
from harness.models.build import decoder_parts
from harness.models.init_weights import init_weights


class FSDP2Engine:
    name = "fsdp2"

    def wrap(self, model: nn.Module, ctx: RunContext) -> Wrapped:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
        policy = MixedPrecisionPolicy(
            param_dtype=ctx.param_dtype, reduce_dtype=ctx.reduce_dtype, cast_forward_inputs=False
        )
        parts = decoder_parts(model)
        head = [parts.norm, parts.head]
        fully_shard(parts.embed, mesh=mesh, mp_policy=policy, reshard_after_forward=True)
        # The last modules of forward are the first of backward: keep them unsharded.
        fully_shard(head, mesh=mesh, mp_policy=policy, reshard_after_forward=False)
        for layer in parts.layers:
            fully_shard(layer, mesh=mesh, mp_policy=policy, reshard_after_forward=True)
        sharded = fully_shard(model, mesh=mesh, mp_policy=policy)
        model.to_empty(device=ctx.device)
        init_weights(model, ctx.seed)
        if ctx.cfg.async_unshard:
            # A private switch in torch 2.6+; the tuned variant cannot exist without it.
            sharded._set_unshard_async_op(True)
            prefetch_chain([parts.embed, *parts.layers], head)

        params: list[torch.Tensor] = list(model.parameters())
        groups = fsdp2_groups(model)
        sync_every = ctx.cfg.sync_every_micro_batch
        return Wrapped(
            module=model,
            params=params,
            clip_grad_norm_=lambda max_norm: clip_grad_norm(params, max_norm),
            loss_scale=1.0 / ctx.grad_accum,
            before_micro_batch=lambda i: sharded.set_requires_gradient_sync(
                sync_every or i == ctx.grad_accum - 1
            ),
            settings={
                "groups": [g["modules"] for g in groups],
                "reshard_after_forward": [g["reshard_after_forward"] for g in groups],
                "param_dtype": dtype_name(ctx.param_dtype),
                "reduce_dtype": dtype_name(ctx.reduce_dtype),
                "cast_forward_inputs": False,
                "async_unshard": ctx.cfg.async_unshard,
                "explicit_prefetch": ctx.cfg.async_unshard,
                "gradient_sync": "every micro-batch" if sync_every else "last micro-batch",
                "clip": "get_total_norm(foreach) + full_tensor + clip_grads_with_norm_",
            },
        )


def prefetch_chain(chain: list[nn.Module], head: list[nn.Module]) -> None:
    """Explicit prefetch along execution order: forward unshards the next group during the
    current one (the last block prefetches `head`), backward the previous one. Every module
    here has been through fully_shard."""
    units = cast("list[FSDPModule]", chain)
    after = cast("list[FSDPModule]", head)
    for i, module in enumerate(units):
        module.set_modules_to_forward_prefetch([units[i + 1]] if i + 1 < len(units) else after)
        if i > 0:
            module.set_modules_to_backward_prefetch([units[i - 1]])
    after[-1].set_modules_to_backward_prefetch([units[-1]])


def fsdp2_groups(model: nn.Module) -> list[dict[str, Any]]:
    """The sharded groups that own parameters, in module registration order (forward order
    for this Llama): each group's module names, as in the unwrapped model, and whether it
    reshards after forward."""
    from torch.distributed.fsdp import FSDPModule

    owners: dict[int, dict[str, Any]] = {}
    order: list[int] = []
    for name, module in model.named_modules():
        if not isinstance(module, FSDPModule):
            continue
        group = module._get_fsdp_state()._fsdp_param_group
        if group is None:  # the root owns no parameters of its own here
            continue
        key = id(group)
        if key not in owners:
            owners[key] = {
                "modules": [],
                "reshard_after_forward": group.post_forward_mesh_info is not None,
            }
            order.append(key)
        owners[key]["modules"].append(canonical_module_name(name) or "<root>")
    return [owners[k] for k in order]
