"""The upstream YaFSDP library (`ya_fsdp.fully_shard`, yandex/YaFSDP v2), where it is installed.

| setting | value | source |
| --- | --- | --- |
| library | `ya_fsdp` from yandex/YaFSDP at commit 669fc366f1fb9dcd311c862a1c7450990c8d3721 (pure Python, Apache-2.0), installed by the user: `pip install "ya-fsdp @ git+https://github.com/yandex/YaFSDP@669fc366f1fb9dcd311c862a1c7450990c8d3721"`. Not from PyPI: `yandex-ya-fsdp` there is a placeholder against dependency confusion, not this library | `README.md` |
| groups | `tok_embeddings`; each block; `[norm, output]`; the root, as `fsdp2` (torchtitan's grouping) | torchtitan `apply_fsdp_to_decoder` |
| reshard_after_forward | True for the embedding and the blocks, False for `[norm, output]` | same |
| mp_policy | `ya_fsdp.MixedPrecisionPolicy(param_dtype=job dtype, reduce_dtype=engine.reduce_dtype)` | the library's API |
| materialisation | `fully_shard` on the meta model, `to_empty`, then each `RaggedShard` piece (`global_offset`, `local_numel` of the flattened parameter) filled from the harness's initial weights | the library's `RaggedShard` placement |
| gloo | the library's all-gather is wrapped in `torch.autograd._unsafe_preserve_version_counter(output)` on gloo only: gloo's all-gather bumps the version counter of the gather buffer its parameters view, and autograd then refuses the saved views in backward | found here on 2 gloo ranks |
| optimizer | the harness's AdamW; `adamw_impl=for-loop` is refused (the library's tensor class has no `lerp_`, which the for-loop AdamW calls) | the library's `RaggedShardDTensor` dispatch |
| clipping, division | as `fsdp2`: foreach total norm over the sharded gradients; mean over ranks, loss scaled by 1/grad_accum | torchtitan |
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from harness.engines.base import RunContext, Wrapped, clip_grad_norm, dtype_name
from harness.engines.upstream import PINNED_COMMIT
from harness.models.build import decoder_parts
from harness.models.init_weights import initial_value


def keep_gather_versions_on_gloo() -> None:
    """On gloo only: the library's all-gather leaves the output buffer's version counter
    as it was (gloo's all-gather bumps it, and the parameters are views of that buffer)."""
    import ya_fsdp._param_group as param_group

    if dist.get_backend() != "gloo" or getattr(param_group.all_gather, "_keeps_versions", False):
        return
    gather = param_group.all_gather

    @functools.wraps(gather)
    def all_gather(*args: Any, **kwargs: Any) -> Any:
        output = kwargs["all_gather_output"] if "all_gather_output" in kwargs else args[4]
        with torch.autograd._unsafe_preserve_version_counter(output):
            return gather(*args, **kwargs)

    all_gather._keeps_versions = True  # type: ignore[attr-defined]
    param_group.all_gather = all_gather


class YaFSDPUpstreamEngine:
    name = "ya_fsdp"

    def wrap(self, model: nn.Module, ctx: RunContext) -> Wrapped:
        import ya_fsdp
        from torch.distributed.device_mesh import init_device_mesh

        keep_gather_versions_on_gloo()
        mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
        policy = ya_fsdp.MixedPrecisionPolicy(
            param_dtype=ctx.param_dtype, reduce_dtype=ctx.reduce_dtype
        )
        parts = decoder_parts(model)
        shard = functools.partial(ya_fsdp.fully_shard, mesh=mesh, mp_policy=policy)
        shard(parts.embed, reshard_after_forward=True)
        shard([parts.norm, parts.head], reshard_after_forward=False)
        for layer in parts.layers:
            shard(layer, reshard_after_forward=True)
        shard(model)
        model.to_empty(device=ctx.device)
        fill_ragged_pieces(model, ctx)
        params: list[torch.Tensor] = list(model.parameters())
        return Wrapped(
            module=model,
            params=params,
            clip_grad_norm_=lambda max_norm: clip_grad_norm(params, max_norm),
            loss_scale=1.0 / ctx.grad_accum,
            settings={
                "library": f"ya_fsdp (yandex/YaFSDP@{PINNED_COMMIT[:7]})",
                "groups": "tok_embeddings; each block; [norm, output]; root (torchtitan's)",
                "param_dtype": dtype_name(ctx.param_dtype),
                "reduce_dtype": dtype_name(ctx.reduce_dtype),
                "gloo_version_counter_wrapper": dist.get_backend() == "gloo",
                "gradient_sync": "every micro-batch",
                "clip": "get_total_norm(foreach) + clip_grads_with_norm_",
            },
        )


@torch.no_grad()
def fill_ragged_pieces(model: nn.Module, ctx: RunContext) -> None:
    """Each parameter's local piece, from the harness's initial value of the whole."""
    for name, param in model.named_parameters():
        (placement,) = param.placements  # type: ignore[attr-defined]
        local = param._local_tensor  # type: ignore[attr-defined]
        full = initial_value(name, param.shape, ctx.seed, ctx.device).flatten()
        start = placement.global_offset
        local.view(-1).copy_(full[start : start + placement.local_numel].to(local.dtype))
