"""Our YaFSDP engine (`yafsdp_impl`), set up as yandex/YaFSDP's example set it up.

| setting | value | source |
| --- | --- | --- |
| units | token embedding, each block, output projection (on an HF model: `model.embed_tokens`, each decoder layer, `lm_head`) | `patches/transformers.diff` (`run_clm.py`): `ya_fsdp_modules_to_wrap_with_names` |
| resident unit | every norm weight (found by type) plus parameters outside all units, gathered once per step | `ya_fsdp_layer_norm_module_cls` in the same patch |
| param dtype / reduce dtype | job dtype / fp32 (`engine.reduce_dtype`) | the original class's default `bit16_reduce_scatter=False` |
| activation checkpointing | `checkpoint_wrapper` (non-reentrant) inside the unit, applied by the harness for every engine | accelerate's `apply_activation_checkpointing` on the wrapped model |
| gradient division | summed, divided once by P x accumulation at the end, so the loss is not pre-scaled | the engine's design |
| clipping | the engine's `clip_grad_norm_`: shard norms summed during backward, then one scalar all-reduce and one scale | the engine's API |
| buffer plan | `engine.buffer_plan` (default `auto`: the engine's choice for its memory budget, `engine.memory_budget_gb`, else 90% of the device's memory less what the planner predicts the rest of the step holds: `harness.plan.planner.yafsdp_memory_budget`): `separate_ends` (embedding and output a buffer each, the layers alternating two layer-sized ones) where it fits, else `min_bytes` (the smallest of `alternating`, `lean_alternating` and `ends_shared`); `half_staging` and `split_vocab` (the embedding and the output projection each split into two vocabulary-half units, so buffers are sized by the larger of a layer and half an end) only by name; the settings name the plan held and the smallest one | the engine's API |
| step start | gathers start at the next forward (default). With `YaFSDPEngine(prefetch_next_step=True)` the step ends with the engine's `prefetch_next_step()` then `wait_in_flight()`: the next step's first gathers are issued and waited inside this step's clock, so no work escapes it (on CPU no device synchronisation would wait for gloo's threads). Off by default: on a shared 2-core CPU (llama_small fp32, 2 ranks, interleaved with the default) it took 0.93 of the default's step at seq 256 (one run) and 0.96 and 0.99 at seq 1024 (two runs), inside that machine's run-to-run noise; to be measured on a quiet machine before it is turned on | this project's fairness rule (the timed step is the same work for every engine) |
| optimizer | the harness's AdamW (`adamw_impl`, fused by default) as one call over the flat fp32 master shards, one per unit plus the resident one | the engine's design |
"""

from __future__ import annotations

from torch import nn

from harness.engines.base import RunContext, Wrapped, canonical_module_name, dtype_name
from harness.models.build import decoder_parts
from harness.models.init_weights import initial_value
from yafsdp_impl import YaFSDP


class YaFSDPEngine:
    name = "yafsdp"

    def __init__(self, *, prefetch_next_step: bool = False) -> None:
        self.prefetch_next_step = prefetch_next_step

    def wrap(self, model: nn.Module, ctx: RunContext) -> Wrapped:
        # The model stays on the meta device: the engine asks for each parameter's initial
        # value only where it overlaps this rank's shards, so no rank holds the full model.
        parts = decoder_parts(model)
        units = [parts.embed, *parts.layers, parts.head]
        names = {module: name for name, module in model.named_modules()}
        # The ranges name each unit by its path in the unwrapped model ('layers.3'), as
        # FSDP2's do and the trace tools and the planner show it.
        unit_names = [canonical_module_name(names[m]) for m in units]
        engine = YaFSDP(
            model,
            units,
            unit_names=unit_names,
            param_dtype=ctx.param_dtype,
            reduce_dtype=ctx.reduce_dtype,
            grad_accum_steps=ctx.grad_accum,
            device=ctx.device,
            init_fn=lambda name, shape: initial_value(name, shape, ctx.seed, ctx.device),
            buffer_plan=ctx.cfg.buffer_plan,
            memory_budget_bytes=ctx.memory_budget_bytes,
        )

        def prefetch_and_wait() -> None:
            engine.prefetch_next_step()
            engine.wait_in_flight()  # inside the step's clock: the same work for every engine

        return Wrapped(
            module=engine.module,
            params=engine.parameters(),
            clip_grad_norm_=engine.clip_grad_norm_,
            after_step=prefetch_and_wait if self.prefetch_next_step else lambda: None,
            memory_breakdown=engine.memory_report,
            settings={
                "units": [unit.name for unit in engine.layout.units],  # split_vocab's halves
                "resident_unit": "norm weights (by type) and parameters outside every unit",
                "param_dtype": dtype_name(ctx.param_dtype),
                "reduce_dtype": dtype_name(ctx.reduce_dtype),
                "gradient_sync": "every micro-batch",
                "clip": "YaFSDP.clip_grad_norm_ (norms summed in backward, one all-reduce)",
                "buffer_plan": plan_setting(engine),
                # the budget the plan was chosen for (None: none, the smallest plan); the
                # report holds the job's prediction.json to it
                "memory_budget_bytes": ctx.memory_budget_bytes,
                "prefetch": (
                    "next step's first gathers issued and waited at the step's end"
                    if self.prefetch_next_step
                    else "none after the optimizer step (gathers start at the next forward)"
                ),
                "optimizer_params": f"{len(engine.parameters())} flat fp32 master shards",
            },
        )


def plan_setting(engine: YaFSDP) -> str:
    """The plan chosen, and the one it was chosen over for the memory budget, short enough
    for a table cell: `separate_ends: buffers 2×2.1M + 2×786K, staging 786K elements;
    0.07 GiB of a 23.5 GiB budget, over ends_shared (0.06 GiB)`."""
    c, gib, plan = engine.plan_choice, 2**30, engine.buffer_plan
    sizes = " + ".join(
        f"{plan.buffer_numel.count(n)}×{_count(n)}" for n in dict.fromkeys(plan.buffer_numel)
    )
    text = f"{plan.name}: buffers {sizes}, staging {_count(plan.staging_numel)} elements"
    if c.budget_bytes is not None:
        text += f"; {c.plan_bytes / gib:.2g} GiB of a {c.budget_bytes / gib:.3g} GiB budget"
    if c.rejected is not None and c.rejected_bytes is not None:
        text += f", over {c.rejected.name} ({c.rejected_bytes / gib:.2g} GiB)"
    if c.smallest is not None and c.smallest_bytes is not None and c.smallest != plan:
        text += f"; smallest {c.smallest.name} ({c.smallest_bytes / gib:.2g} GiB)"
    return text


def _count(n: int) -> str:
    """2097152 -> 2.1M, 786432 -> 786K."""
    for unit, size in (("G", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)
