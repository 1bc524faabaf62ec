"""A job's model, whichever implementation (`model_impl`): build it on the meta device,
find the parts every engine shards, read logits from its output, and keep its buffers
through an engine's materialisation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

from harness.models.init_weights import canonical_name
from harness.models.llama import Llama, build_model
from harness.models.shapes import ModelShape, get_shape


@dataclass(frozen=True)
class DecoderParts:
    """What the engines shard: token embedding, decoder layers, final norm, output head."""

    embed: nn.Module
    layers: nn.ModuleList
    norm: nn.Module
    head: nn.Module

    @property
    def layer_class(self) -> str:
        """The decoder layer's class (inside any checkpoint wrapper)."""
        layer = self.layers[0]
        return type(getattr(layer, "_checkpoint_wrapped_module", layer)).__name__


def build_job_model(model: str | ModelShape, impl: str) -> tuple[nn.Module, ModelShape]:
    """The model of `model` (a preset, `hf:<path>`, or shapes no preset names) in
    implementation `impl` on meta, and its shapes."""
    if isinstance(model, ModelShape):
        if impl != "native":
            raise ValueError(f"model_impl={impl!r} needs a named model, not bare shapes")
        return build_model(model, device="meta"), model
    if impl == "native":
        shape = get_shape(model)
        return build_model(shape, device="meta"), shape
    from harness.models.hf import build_hf_model, hf_config, hf_shape

    config = hf_config(model)
    module = build_hf_model(config)
    return module, hf_shape(model, config, module)


def decoder_parts(model: nn.Module) -> DecoderParts:
    if isinstance(model, Llama):
        return DecoderParts(model.tok_embeddings, model.layers, model.norm, model.output)
    from harness.models.hf import hf_parts

    return DecoderParts(*hf_parts(model))


def logits_of(output: torch.Tensor | object) -> torch.Tensor:
    """The native model returns logits; an HF model returns an output with `.logits`."""
    return output if isinstance(output, torch.Tensor) else output.logits  # type: ignore[attr-defined]


@torch.no_grad()
def snapshot_buffers(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every buffer's value by name (HF's rotary `inv_freq`), taken before an engine
    materialises the model: `to_empty` leaves buffers uninitialised, and no engine
    initialises them. The native Llama has none."""
    return {name: buf.detach().clone() for name, buf in model.named_buffers()}


@torch.no_grad()
def restore_buffers(
    module: nn.Module, values: dict[str, torch.Tensor], device: torch.device
) -> None:
    """Put the snapshot's values back into the wrapped module, by unwrapped name, in their
    own dtype (an engine's cast to the parameter dtype must not round `inv_freq`)."""
    for module_name, owner in module.named_modules():
        for key, buf in owner._buffers.items():
            name = canonical_name(f"{module_name}.{key}" if module_name else key)
            if buf is not None and name in values:
                owner._buffers[key] = values[name].to(device)


def model_settings(model: nn.Module) -> dict[str, str]:
    """Which implementation a job trained, for result.json `engine_settings`."""
    if isinstance(model, Llama):
        return {
            "model_impl": "native",
            "model_class": "harness.models.llama.Llama",
            "attention": "sdpa (F.scaled_dot_product_attention, is_causal)",
        }
    import transformers

    return {
        "model_impl": "hf",
        "model_class": f"transformers {transformers.__version__} {type(model).__name__}",
        "attention": str(cast(Any, model).config._attn_implementation),
    }
