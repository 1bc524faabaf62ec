"""DeepSpeed ZeRO-3, set up as its best users run it on a Llama.

| setting | value | source |
| --- | --- | --- |
| stage | 3 (parameters, gradients and optimizer state partitioned) | DeepSpeed ZeRO-3 |
| fetch units | each transformer block is one ZeRO-3 leaf (`set_z3_leaf_modules` on the block class): its parameters are fetched together on entering it; the embedding and the output projection are fetched as modules of their own | DeepSpeed's advice for fine-grained modules (`deepspeed.utils.set_z3_leaf_modules`), as HF/accelerate users set it for decoder layers |
| stage3_param_persistence_threshold | the largest norm weight's element count (the model's dim): the norm weights stay resident, and with them any parameter as small (DeepSpeed's rule is by size: Qwen2's attention biases; Llama has none), counted in the settings | yafsdp's resident unit (norm weights gathered once per step), the same rule in DeepSpeed's terms |
| prefetch and buckets | DeepSpeed's defaults, each recorded as the engine ran them (`stage3_prefetch_bucket_size`, `stage3_max_live_parameters`, `stage3_max_reuse_distance`, `reduce_bucket_size`, `overlap_comm`, `contiguous_gradients`) | `deepspeed.runtime.zero.config.DeepSpeedZeroConfig` |
| materialisation | the meta model is materialised one module at a time, each converted at once with `zero.Init(module=...)`, so no rank holds more than one module unpartitioned (`zero.Init` on the whole meta model fails) | `deepspeed.zero.Init(module=...)` |
| precision | bf16 jobs: `bf16.enabled` (bf16 weights, fp32 master partitions in the optimizer); fp32 jobs: fp32 throughout | DeepSpeed's bf16 mode |
| gradient reduction dtype | `communication_data_type` and `data_types.grad_accum_dtype` = the job's `engine.reduce_dtype` (fp32): gradients are reduced and kept in fp32 partitions until the step. DeepSpeed's defaults are the weights' dtype for both | `DeepSpeedEngine.communication_data_type`, `get_data_types` |
| fp32 master partitions | filled from the fp32 initial values after `deepspeed.initialize` (every other engine starts its masters from them). Why stock DeepSpeed's bf16 grad norms differ by ~1e-3: it copies its fp32 masters from the bf16 weights, which have lost the initial values' low bits, so after one step its bf16 weights round differently from every other engine's (llama_tiny, 2 ranks, bf16, seq 64: step-2 grad norm 3.06202 against the reference's 3.06459, 8e-4 relative, with the loss 4e-5 off). Its bf16 gradient partitions (`grad_accum_dtype` default) add ~1e-5 at step 1 (2.79308 against 2.79311). With both set as here its norms equal yafsdp's to the printed digit | measured here (llama_tiny, 2 gloo ranks, bf16, seq 64, 3 steps, clip 0.5, each setting toggled alone); `tests/engines/test_deepspeed.py` holds deepspeed's bf16 norms to yafsdp's within 1e-5 |
| optimizer and step | the harness's AdamW (`adamw_impl`, lr, weight_decay=0) handed to `deepspeed.initialize` as the client optimizer; DeepSpeed runs the backward (`engine.backward`), clipping (`gradient_clipping` = the job's clip) and the step, and reports the norm before clipping (`get_global_grad_norm`) | `deepspeed.initialize(optimizer=...)` |
| gradient accumulation | `gradient_accumulation_steps` = the job's; DeepSpeed divides the loss by it and reduce-scatters every micro-batch (ZeRO-3 always does) | DeepSpeed's managed accumulation |
| profiler ranges | the adapter adds `DeepSpeed::fetch (<module>)`, `DeepSpeed::release (<module>)` and `DeepSpeed::reduce (<first>..<last>)` around each fetch, release and gradient-bucket reduce (DeepSpeed emits none into torch.profiler on CPU) | this project's trace grammar |
| GPU | `$LOCAL_RANK` set to the index of the GPU the harness placed the rank on, before DeepSpeed starts: DeepSpeed takes its device from `$LOCAL_RANK` (`zero.Init`, the engine, ZeRO-3's rank checks), which is not the GPU's index where ranks share one GPU (gloo) or a cluster binds one GPU per task | `deepspeed.runtime.zero.partition_parameters.Init`, `DeepSpeedEngine._configure_with_arguments` |
| shared-memory op | `deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False` before DeepSpeed starts: on CPU it would otherwise JIT-build an inference-only op (about 95 s on 2 cores) | `deepspeed.comm.torch.build_shm_op` |
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from typing import Any

import torch
from torch import nn

from harness.engines.base import (
    RunContext,
    Wrapped,
    build_optimizer,
    canonical_module_name,
    dtype_name,
)
from harness.engines.deepspeed_ranges import add_profiler_ranges
from harness.models.build import decoder_parts
from harness.models.init_weights import initial_value

# The zero_optimization fields whose defaults the settings table records.
DEFAULTS_RECORDED = ("prefetch_bucket_size", "max_live_parameters", "max_reuse_distance",
                     "reduce_bucket_size", "overlap_comm", "contiguous_gradients",
                     "sub_group_size")  # fmt: skip


def import_deepspeed() -> Any:
    """deepspeed, with its inference-only shared-memory op kept from being JIT-built."""
    import deepspeed
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    return deepspeed


def persistence_threshold(model: nn.Module) -> tuple[int, list[str]]:
    """yafsdp's resident unit in DeepSpeed's terms: the largest norm weight's size, so the
    norm weights persist; and the other parameters that small, which persist with them
    (DeepSpeed's rule is by size, not type: Qwen2's attention biases, for one)."""
    parts = decoder_parts(model)
    norms = {id(p) for m in model.modules() if isinstance(m, type(parts.norm))
             for p in m.parameters(recurse=False)}  # fmt: skip
    threshold = max(p.numel() for p in model.parameters() if id(p) in norms)
    also = [canonical_module_name(n) for n, p in model.named_parameters()
            if id(p) not in norms and p.numel() <= threshold]  # fmt: skip
    return threshold, also


def ds_config(ctx: RunContext, threshold: int) -> dict[str, Any]:
    """The DeepSpeed config: ZeRO-3 with its defaults but for the persistence threshold."""
    reduce = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": ctx.grad_accum,
        "gradient_clipping": ctx.clip_grad_norm,
        "bf16": {"enabled": ctx.param_dtype == torch.bfloat16},
        "fp16": {"enabled": False},
        "communication_data_type": reduce[ctx.reduce_dtype],
        # Reduced gradient partitions kept in the reduce dtype, not rounded back to bf16.
        "data_types": {"grad_accum_dtype": reduce[ctx.reduce_dtype]},
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": threshold},
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }


def materialise_into_zero(model: nn.Module, ctx: RunContext, config: dict[str, Any]) -> None:
    """Materialise the meta model one module at a time, each partitioned at once."""
    deepspeed = import_deepspeed()
    for prefix, module in model.named_modules():
        for key, buf in module._buffers.items():  # the session puts their values back
            if buf is not None and buf.is_meta:
                module._buffers[key] = torch.empty_like(buf, device=ctx.device)
        if not list(module.parameters(recurse=False)):
            continue
        # In the job's dtype: a copy into the meta model's fp32 tensors would leave the
        # weights fp32 (bf16-valued) and DeepSpeed would compute in fp32.
        module.to_empty(device=ctx.device, recurse=False)
        for name, param in module.named_parameters(recurse=False):
            full = f"{prefix}.{name}" if prefix else name
            value = initial_value(full, param.shape, ctx.seed, ctx.device)
            param.data = value.to(ctx.param_dtype)
        # zero.Init(module=...) partitions the parameters not yet partitioned: this one's.
        deepspeed.zero.Init(module=module, config_dict_or_path=config, dtype=ctx.param_dtype)


@torch.no_grad()
def seed_fp32_masters(ds_optimizer: Any, model: nn.Module, ctx: RunContext) -> None:
    """Fill each fp32 master partition from the fp32 initial values, as every other engine
    starts its masters. DeepSpeed copies them from the weights, which in a bf16 job have
    lost their low bits: after one step its bf16 weights would round differently from
    every other engine's (grad norms ~1e-3 apart at step 2). Through ZeRO-3's own lookup
    of a parameter's fp32 partition (`safe_set_full_fp32_param` cannot take the last
    rank's padded partition)."""
    for name, param in model.named_parameters():
        part, _ = ds_optimizer._get_fp32_opt_state_partition(param, release_swap_buffers=False)
        start = part.numel() * ds_optimizer._get_param_partition_rank(param)
        shape = param.ds_shape  # type: ignore[attr-defined]  # ZeRO-3's full shape
        value = initial_value(name, shape, ctx.seed, ctx.device).flatten()
        chunk = value[start : start + part.numel()]
        part.zero_()
        part[: chunk.numel()].copy_(chunk)


def use_placed_gpu(device: torch.device, env: MutableMapping[str, str] = os.environ) -> None:
    """Point DeepSpeed at the GPU the harness placed this rank on. DeepSpeed takes its
    device from `$LOCAL_RANK` (`zero.Init`, `DeepSpeedEngine`, and ZeRO-3's rank checks
    during the steps), which is not the GPU's index where ranks share one GPU (gloo) or
    where the cluster binds one GPU to each task (each sees it as device 0): set it to the
    placed index for the rest of the rank's life."""
    if device.type != "cuda":
        return
    index = str(device.index if device.index is not None else torch.cuda.current_device())
    env["LOCAL_RANK"] = index
    if "OMPI_COMM_WORLD_LOCAL_RANK" in env:  # DeepSpeed asserts the two agree
        env["OMPI_COMM_WORLD_LOCAL_RANK"] = index


class DeepSpeedEngine:
    name = "deepspeed"

    def wrap(self, model: nn.Module, ctx: RunContext) -> Wrapped:
        deepspeed = import_deepspeed()
        from deepspeed.utils import set_z3_leaf_modules_by_name

        use_placed_gpu(ctx.device)
        parts = decoder_parts(model)
        threshold, also_resident = persistence_threshold(model)
        config = ds_config(ctx, threshold)
        # Each block (its checkpoint wrapper where it has one) is one fetch unit.
        names = {module: name for name, module in model.named_modules()}
        set_z3_leaf_modules_by_name(model, [names[layer] for layer in parts.layers])
        materialise_into_zero(model, ctx, config)
        optimizer = build_optimizer(model.parameters(), lr=ctx.lr, impl=ctx.adamw_impl)
        engine, ds_optimizer, _, _ = deepspeed.initialize(
            model=model, optimizer=optimizer, config=config, dist_init_required=False
        )
        seed_fp32_masters(ds_optimizer, model, ctx)
        add_profiler_ranges(engine, model)
        settings = _settings(engine, ctx, threshold, also_resident)
        return _wrapped(engine, ds_optimizer, ctx, settings)


def _wrapped(engine: Any, ds_optimizer: Any, ctx: RunContext, settings: dict[str, Any]) -> Wrapped:
    micro = [0]

    def backward(loss: torch.Tensor) -> None:
        engine.backward(loss)  # divides by gradient_accumulation_steps itself
        if micro[0] < ctx.grad_accum - 1:
            engine.step()  # off the boundary DeepSpeed only counts the micro-batch

    def step() -> torch.Tensor | None:
        engine.step()
        if ctx.clip_grad_norm <= 0:
            return None
        return torch.as_tensor(engine.get_global_grad_norm(), dtype=torch.float32)

    def before_micro_batch(i: int) -> None:
        micro[0] = i

    return Wrapped(
        module=engine,
        params=[],
        clip_grad_norm_=_no_separate_clip,
        before_micro_batch=before_micro_batch,
        backward=backward,
        step=step,
        optimizer=ds_optimizer,
        unwrapped=engine.module,
        settings=settings,
    )


def _no_separate_clip(max_norm: float) -> torch.Tensor:
    raise RuntimeError("engine=deepspeed clips inside its own step (Wrapped.step)")


def _settings(
    engine: Any, ctx: RunContext, threshold: int, also_resident: list[str]
) -> dict[str, Any]:
    zero = engine._config.zero_config  # the effective DeepSpeedZeroConfig
    leaves = [canonical_module_name(n) for n, m in engine.module.named_modules()
              if getattr(m, "_z3_leaf", False)]  # fmt: skip
    return {
        "zero_stage": 3,
        "z3_leaf_modules": f"{len(leaves)} transformer blocks ({leaves[0]}..{leaves[-1]})",
        "stage3_param_persistence_threshold": f"{threshold} (the norm weights: yafsdp's "
        "resident-unit rule)",
        "also_resident": f"{len(also_resident)} parameters no larger than a norm weight"
        + (f" ({also_resident[0]}, ...)" if also_resident else ""),
        **{f"default {k}": getattr(zero, k) for k in DEFAULTS_RECORDED},
        "param_dtype": dtype_name(ctx.param_dtype),
        "reduce_dtype": dtype_name(engine.communication_data_type),
        "grad_accum_dtype": dtype_name(engine.get_data_types()[1]),
        "bf16_note": "stock DeepSpeed copies its fp32 masters from the bf16 weights and keeps "
        "reduced gradients in bf16; here masters come from the fp32 initial values and "
        "gradients stay in the reduce dtype, as in every other engine",
        "gradient_sync": "every micro-batch (ZeRO-3)",
        "clip": f"DeepSpeed gradient_clipping={ctx.clip_grad_norm} inside engine.step()",
        "step": f"engine.step(): client torch.optim.AdamW({ctx.adamw_impl}) over its fp32 "
        "partitions, seeded from the fp32 initial values",
        "materialisation": "one module at a time into zero.Init(module=...)",
        "deepspeed": _version(),
    }


def _version() -> str:
    import deepspeed

    return str(deepspeed.__version__)
