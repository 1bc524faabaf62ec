"""Our YaFSDP engine (`yafsdp_impl`): units = token embedding, each layer, output.

Norm weights go to the engine's resident unit by type; `ckpt_layers` checkpoints the first
N layer units. The engine sums gradients and divides once by P x accumulation at the end,
so the loss is not pre-scaled (loss_scale 1).
"""

from __future__ import annotations

from torch import nn

from harness.engines.base import RunContext, Wrapped
from harness.init import initial_value
from yafsdp_impl import YaFSDP


class YaFSDPEngine:
    name = "yafsdp"

    def wrap(self, model: nn.Module, ctx: RunContext) -> Wrapped:
        # The model stays on the meta device: the engine asks for each parameter's initial
        # value only where it overlaps this rank's shards, so no rank holds the full model.
        engine = YaFSDP(
            model,
            [model.tok_embeddings, *model.layers, model.output],
            param_dtype=ctx.param_dtype,
            reduce_dtype=ctx.reduce_dtype,
            grad_accum_steps=ctx.grad_accum,
            ckpt_units=list(model.layers[: ctx.ckpt_layers]),
            device=ctx.device,
            init_fn=lambda name, shape: initial_value(name, shape, ctx.seed, ctx.device),
        )
        return Wrapped(
            module=engine.module,
            params=engine.parameters(),
            clip_grad_norm_=engine.clip_grad_norm_,
            memory_breakdown=engine.memory_report,
        )
