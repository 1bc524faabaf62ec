"""The yafsdp engine's layout and buffers for a model, from `yafsdp_impl`'s own code on the
meta device: what the memory and time models read its buffers from."""

from __future__ import annotations

import functools

from harness.plan.memory.activations import DTYPE_BYTES


@functools.lru_cache(maxsize=16)
def _meta_model(model: str, split_vocab: bool = False):  # noqa: ANN202 (torch stays lazy)
    """The model on meta and its units; a preset's native and Hugging Face builds lay out
    alike (same parameter shapes), an hf:<path> config only as its own Hugging Face model.
    `split_vocab`: the ends split into vocabulary halves, as the engine splits them for
    that plan (a model of its own: the split changes the modules in place)."""
    from harness.models.build import build_job_model, decoder_parts
    from harness.models.shapes import is_hf_config
    from yafsdp_impl import split_vocab_units

    m = build_job_model(model, "hf" if is_hf_config(model) else "native")[0]
    parts = decoder_parts(m)
    units = [parts.embed, *parts.layers, parts.head]
    return m, split_vocab_units(units) if split_vocab else units


@functools.lru_cache(maxsize=64)
def yafsdp_layout(
    model: str,
    world_size: int,
    dtype: str,
    reduce_dtype: str,
    native_reduce_scatter: bool,
    buffer_plan: str = "auto",
    budget_bytes: int | None = None,
):  # noqa: ANN201 (torch stays a lazy import)
    """The yafsdp engine's layout, its plan choice and its buffers for `model`, from its own
    layout and buffer-plan code run on the meta device (no memory is allocated): the plan
    the engine would choose for `budget_bytes` (see `YaFSDP(buffer_plan=...)`)."""
    import torch

    from harness.dtypes import DTYPES
    from yafsdp_impl import Buffers, build_layout, plan_buffers, splits_vocab

    m, units = _meta_model(model, splits_vocab(buffer_plan))
    layout = build_layout(m, units, world_size)
    p, r = DTYPE_BYTES[dtype], DTYPE_BYTES[reduce_dtype]
    choice = plan_buffers(layout, buffer_plan, budget_bytes, param_bytes=p, reduce_bytes=r,
                          native_reduce_scatter=native_reduce_scatter)  # fmt: skip
    buffers = Buffers(
        layout,
        choice.plan,
        device=torch.device("meta"),
        param_dtype=DTYPES[dtype],
        reduce_dtype=DTYPES[reduce_dtype],
        native_reduce_scatter=native_reduce_scatter,
    )
    return layout, buffers, choice
