"""Per-rank peak memory of one job, by class, for every engine.

Held all step long: the sharded states (fp32 master shards, their fp32 gradients, AdamW's
two fp32 moments) and, for yafsdp, the buffers its plan allocates once (read from
`yafsdp_impl`, not restated). Held for a while: each engine's unsharded weights and
gradients while a unit runs, activations (measured per block, `activations.py`), the
logits and loss. The peak is the largest sum over the moments of a steady-state step
(the second step on: AdamW's moments exist from the first optimizer step on).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from harness.engines.registry import spec_of
from harness.models.shapes import shape_of
from harness.models.unit_names import EMBEDDING, LAYERS
from harness.models.units import Units, fsdp1_units, fsdp2_units
from harness.plan.memory.activations import (
    DTYPE_BYTES,
    activation_footprint,
    activation_moments,
    merge_bytes,
)
from harness.plan.memory.yafsdp_layout import yafsdp_layout

__all__ = ["yafsdp_layout"]  # kept importable from here, where its callers look for it

FP32 = 4
ADAMW_STATES = 2  # exp_avg, exp_avg_sq, fp32 like the master weights
# A predicted peak at this share of device memory or more is "tight": left for
# fragmentation and the allocator's per-stream pools is too little to count it as fitting.
NEAR_CAPACITY = 0.9
_LAYER_INDEX = re.compile(r"\.\d+\b")  # 'layers.5' -> 'layers': a moment's phase

# Report order of the classes; every estimate has all of them.
CLASSES = (
    "master",
    "sharded_grads",
    "optimizer",
    "unsharded_weights",
    "unsharded_grads",
    "staging",
    "activations_checkpointed",
    "activations_plain",
    "logits_loss",
    "overhead",
)


@dataclass(frozen=True, kw_only=True)
class MemoryCase:
    """What the memory of one job depends on."""

    model: str
    engine: str  # the registry label: yafsdp, fsdp1, fsdp2, fsdp2_tuned, local
    world_size: int
    seq_len: int
    ckpt_layers: int
    micro_batch: int = 1
    dtype: str = "bf16"
    reduce_dtype: str = "fp32"
    # gloo (CPU): collectives run synchronously, nothing is gathered ahead of its use unless
    # the engine asks for it, and a reduce-scatter is an all-reduce of the whole input.
    asynchronous: bool = True
    model_impl: str = "native"
    # Device memory beside the allocator's (CUDA context, NCCL buffers), held all step:
    # only as measured by an earlier sweep (`calibration=`), else 0.
    overhead_bytes: int = 0
    # yafsdp's buffer plan ("auto": chosen for memory_budget_bytes, as the engine chooses)
    buffer_plan: str = "auto"
    memory_budget_bytes: int | None = None


@dataclass(frozen=True)
class MemoryEstimate:
    peak_bytes: int
    by_class: dict[str, int]  # at the peak moment; sums to peak_bytes
    moment: str  # where in the step the peak falls
    moments: dict[str, int] = field(default_factory=dict)  # every moment's total


def moments_by_class(case: MemoryCase) -> dict[str, dict[str, int]]:
    """The bytes held by class at every moment of a steady-state step, in step order."""
    shape = shape_of(case.model)
    acts = activation_footprint(
        case.model, case.seq_len, case.micro_batch, case.dtype, case.model_impl
    )
    timeline = activation_moments(acts, shape.n_layers, case.ckpt_layers)
    static, in_flight = engine_memory(case)
    static = {**static, "overhead": case.overhead_bytes}
    moments: dict[str, dict[str, int]] = {}
    for name, held in timeline.items():
        moments[name] = merge_bytes(merge_bytes(static, held), in_flight.get(_phase(name), {}))
    for name, extra in in_flight.items():  # engine moments without activations
        if name.startswith("after"):
            moments[name] = merge_bytes(static, extra)
    return moments


def estimate_memory(case: MemoryCase) -> MemoryEstimate:
    return peak_of(moments_by_class(case))


def peak_of(moments: dict[str, dict[str, int]]) -> MemoryEstimate:
    """The estimate of a step whose moments hold `moments` (`moments_by_class`)."""
    peak_name = max(moments, key=lambda k: sum(moments[k].values()))
    by_class = {c: moments[peak_name].get(c, 0) for c in CLASSES}
    return MemoryEstimate(
        peak_bytes=sum(by_class.values()),
        by_class=by_class,
        moment=peak_name,
        moments={k: sum(v.values()) for k, v in moments.items()},
    )


def held_all_step(case: MemoryCase) -> dict[str, int]:
    """The bytes by class an engine holds from one step to the next: sharded states and
    (for yafsdp) its buffers; what `estimate_memory` adds moments to."""
    return engine_memory(case)[0]


def _phase(moment: str) -> str:
    """`backward: layers.5 reduce` -> `backward: layers reduce` (engines hold the same at
    every layer)."""
    return _LAYER_INDEX.sub("", moment)


# ---- engines: (held all step, {phase: held during that phase}) ---------------------------

# What an engine holds by class: all step, and in each phase of the step on top of that.
EngineMemory = tuple[dict[str, int], dict[str, dict[str, int]]]


def engine_memory(case: MemoryCase) -> EngineMemory:
    """The memory model of the engine label `case.engine` (MEMORY_MODELS); a label the
    registry lacks is refused by name."""
    return MEMORY_MODELS[spec_of(case.engine).label](case)


def _sharded_states(shard_elements: int) -> dict[str, int]:
    return {
        "master": shard_elements * FP32,
        "sharded_grads": shard_elements * FP32,
        "optimizer": ADAMW_STATES * shard_elements * FP32,
    }


def yafsdp_buffers(case: MemoryCase) -> tuple[dict[str, int], int]:
    """The yafsdp engine's own bytes by class and its master elements per rank."""
    layout, buffers, _ = yafsdp_layout(
        case.model, case.world_size, case.dtype, case.reduce_dtype, case.asynchronous,
        case.buffer_plan, case.memory_budget_bytes,
    )  # fmt: skip
    return buffers.bytes_by_class(), layout.master_numel + layout.resident.shard_numel


# The classes the yafsdp engine itself holds all step (its `memory_report` but the optimizer).
ENGINE_HELD = ("master", "sharded_grads", "unsharded_weights", "unsharded_grads", "staging")


def yafsdp_budget(case: MemoryCase, device_memory_bytes: int) -> int:
    """What the engine's own tensors may take: NEAR_CAPACITY of the device's memory (the
    rest is no room to spend: a plan that grows into it leaves the job tight) less what the
    rest of the step holds at its peak (activations, logits, the optimizer's moments,
    memory outside the allocator), as predicted with the plan that holds fewer bytes."""
    small = replace(case, buffer_plan="min_bytes", memory_budget_bytes=None)
    held = held_all_step(small)
    rest = estimate_memory(small).peak_bytes - sum(held.get(c, 0) for c in ENGINE_HELD)
    return int(NEAR_CAPACITY * device_memory_bytes) - rest


def _largest_weight_grads(case: MemoryCase) -> dict[str, int]:
    """The gradient autograd makes for one weight before it is added into its place: the
    largest weight of each part, in the param dtype (split_vocab: half a table's rows)."""
    shape = shape_of(case.model)
    p = DTYPE_BYTES[case.dtype]
    from harness.models.units import block_param_shapes

    largest_block = max(_numel(s) for s in block_param_shapes(shape))
    rows = -(-shape.vocab_size // 2) if _splits_vocab(case) else shape.vocab_size
    return {"block": largest_block * p, "table": rows * shape.dim * p}


def _splits_vocab(case: MemoryCase) -> bool:
    from yafsdp_impl import splits_vocab

    return case.engine.startswith("yafsdp") and splits_vocab(case.buffer_plan)


def _numel(dims: tuple[int, ...]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def yafsdp_memory(case: MemoryCase) -> EngineMemory:
    held, master_elements = yafsdp_buffers(case)
    static = _sharded_states(master_elements)
    # bytes_by_class's "master" is the master shards and their gradients together
    assert held["master"] == static["master"] + static["sharded_grads"]
    static["unsharded_weights"] = held["weights"]
    static["unsharded_grads"] = held["grads"]
    static["staging"] = held["staging"]
    # Everything else lives in those buffers; autograd's gradient of one weight is the
    # only transient, added in place into the gradient buffer.
    grads = _largest_weight_grads(case)
    in_flight = {
        "backward: projection": {"unsharded_grads": grads["table"]},
        f"backward: {LAYERS}": {"unsharded_grads": grads["block"]},
        f"backward: {EMBEDDING}": {"unsharded_grads": grads["table"]},
    }
    if _splits_vocab(case):  # the halves' logits are concatenated: one more logits' bytes
        tokens = case.seq_len * case.micro_batch
        logits = tokens * shape_of(case.model).vocab_size * DTYPE_BYTES[case.dtype]
        in_flight["forward: projection"] = {"logits_loss": logits}
    return static, in_flight


def _reduce_in_flight(case: MemoryCase, unit: int, *, always_copies: bool) -> dict[str, int]:
    """A reduce-scatter's input in the reduce dtype (a copy where the dtype differs, or
    where the engine always copies into its own buffer), its output shard, and under gloo
    the all-reduce's own full-size buffer (gloo has no reduce-scatter)."""
    p, r = DTYPE_BYTES[case.dtype], DTYPE_BYTES[case.reduce_dtype]
    copy = unit * r if (r != p or always_copies) else 0
    gloo = 0 if case.asynchronous else unit * r
    return {"staging": copy + gloo + unit // case.world_size * r}


def _fsdp(
    case: MemoryCase, units: Units, *, head_kept: bool, forward_ahead: int, fsdp2: bool
) -> EngineMemory:
    """FSDP1 and FSDP2 alike: a unit's weights are gathered for its forward and again for
    its backward; `forward_ahead` more units are gathered ahead in forward, one ahead in
    backward; a unit's gradient is unsharded until its reduce-scatter has read it.
    `head_kept`: the output unit stays unsharded from its forward to its backward."""
    p = DTYPE_BYTES[case.dtype]
    static = _sharded_states(units.shard)
    block, out, emb = units.block * p, units.output * p, units.embedding * p
    # FSDP1 (use_orig_params=False) gets each weight's gradient through a view of the flat
    # parameter: at a unit's end the per-weight gradients and the flat one they are
    # concatenated into are both held. FSDP2 keeps per-parameter gradients only.
    grads = 1 if fsdp2 else 2
    ahead = forward_ahead * block

    # On a GPU the previous unit's reduce-scatter runs on its own stream while the next
    # unit's backward computes: its input is still held.
    def reduce(unit: int) -> dict[str, int]:
        return _reduce_in_flight(case, unit, always_copies=fsdp2)

    previous_rs = reduce(units.block) if case.asynchronous else {}
    kept = out if head_kept else 0
    # Both reshard a unit after its backward and before its reduce-scatter: while a unit's
    # gradients are reduced, only the next unit's (prefetched) weights are unsharded.
    in_flight = {
        f"forward: {LAYERS}": {"unsharded_weights": block + ahead},
        "forward: projection": {"unsharded_weights": out},
        "forward: loss": {"unsharded_weights": kept},
        "backward: loss": {"unsharded_weights": kept},
        "backward: projection": {"unsharded_weights": out + block, "unsharded_grads": out},
        "backward: output reduce": merge_bytes(
            {"unsharded_weights": block, "unsharded_grads": grads * out}, reduce(units.output)
        ),
        f"backward: {LAYERS}": merge_bytes(
            {"unsharded_weights": 2 * block, "unsharded_grads": grads * block}, previous_rs
        ),
        f"backward: {LAYERS} reduce": merge_bytes(
            {"unsharded_weights": block, "unsharded_grads": grads * block},
            merge_bytes(reduce(units.block), previous_rs),
        ),
        f"backward: {EMBEDDING}": {"unsharded_weights": emb, "unsharded_grads": grads * emb},
        f"backward: {EMBEDDING} reduce": merge_bytes(
            {"unsharded_grads": grads * emb}, reduce(units.embedding)
        ),
    }
    return static, in_flight


def fsdp1_memory(case: MemoryCase) -> EngineMemory:
    # forward_prefetch: the next unit's all-gather is issued as a unit's forward starts.
    return _fsdp(case, fsdp1_units(shape_of(case.model), case.world_size),
                 head_kept=False, forward_ahead=1, fsdp2=False)  # fmt: skip


def fsdp2_memory(case: MemoryCase) -> EngineMemory:
    return _fsdp2(case, tuned=False)


def fsdp2_tuned_memory(case: MemoryCase) -> EngineMemory:
    return _fsdp2(case, tuned=True)


def _fsdp2(case: MemoryCase, *, tuned: bool) -> EngineMemory:
    # On a GPU the next group's all-gather is issued while the current one computes; on
    # CPU stock FSDP2 gathers synchronously, the tuned variant one ahead explicitly.
    ahead = 1 if (tuned or case.asynchronous) else 0
    return _fsdp(case, fsdp2_units(shape_of(case.model), case.world_size),
                 head_kept=True, forward_ahead=ahead, fsdp2=True)  # fmt: skip


# DeepSpeedZeroConfig's default reduce_bucket_size (elements): ZeRO-3 allocates its gradient
# bucket at that size in the reduce dtype, however small the model.
DEEPSPEED_REDUCE_BUCKET = 500_000_000


def deepspeed_memory(case: MemoryCase) -> EngineMemory:
    """DeepSpeed ZeRO-3, starting from tuned FSDP2's model (the closest: a block per fetch
    unit, per-parameter gradients, one unit fetched ahead), plus what ZeRO-3 holds beside
    it: its gradient bucket (DEEPSPEED_REDUCE_BUCKET elements), its parameter partitions
    in the job's dtype apart from the fp32 masters, and its flat buffer of gradient
    partitions. Not modelled yet: prefetch deeper than one block (its default prefetch
    bucket is 5e7 elements) and its persistent norm weights. Against the CPU allocator
    (fp32, 2 ranks, seq 128): llama_mini 2046 MiB measured, llama_small 2980 MiB."""
    static, in_flight = _fsdp2(case, tuned=True)
    shard = fsdp2_units(shape_of(case.model), case.world_size).shard
    extra = DEEPSPEED_REDUCE_BUCKET * DTYPE_BYTES[case.reduce_dtype]
    extra += shard * (DTYPE_BYTES[case.dtype] + FP32)
    return {**static, "staging": static.get("staging", 0) + extra}, in_flight


def ya_fsdp_memory(case: MemoryCase) -> EngineMemory:
    """Upstream YaFSDP, starting from FSDP2's model (its grouping is FSDP2's) plus its two
    gather buffers, each the largest group's size in the job's dtype, held for the step.
    Not modelled yet: that the buffers replace FSDP2's per-group unsharded weights."""
    static, in_flight = _fsdp2(case, tuned=False)
    units = fsdp2_units(shape_of(case.model), case.world_size)
    largest = max(units.block, units.embedding, units.output) * DTYPE_BYTES[case.dtype]
    weights = static.get("unsharded_weights", 0) + 2 * largest
    return {**static, "unsharded_weights": weights}, in_flight


def local_memory(case: MemoryCase) -> EngineMemory:
    shape = shape_of(case.model)
    n, p = shape.num_params(), DTYPE_BYTES[case.dtype]
    static = {
        "unsharded_weights": n * p,  # the working copy the model computes with
        "master": n * FP32,
        "sharded_grads": n * FP32,  # the masters' gradients, kept between steps
        "optimizer": ADAMW_STATES * n * FP32,
    }
    # Working gradients accumulate during backward; the all-reduce reads a flat copy.
    out = shape.vocab_size * shape.dim * p
    in_flight = {
        "backward: projection": {"unsharded_grads": out},
        "backward: output reduce": {"unsharded_grads": out},
        f"backward: {LAYERS}": {"unsharded_grads": n * p - out},
        f"backward: {EMBEDDING}": {"unsharded_grads": n * p},
        "after backward: all-reduce": {"staging": n * FP32},
    }
    return static, in_flight


# Each registered engine label's memory model (tests/engines/test_engine_registry.py holds
# that every label has one).
MEMORY_MODELS: dict[str, Callable[[MemoryCase], EngineMemory]] = {
    "yafsdp": yafsdp_memory,
    "fsdp1": fsdp1_memory,
    "fsdp2": fsdp2_memory,
    "fsdp2_tuned": fsdp2_tuned_memory,
    # Compiled blocks hold what the uncompiled ones do (activations are measured eagerly).
    "fsdp2_compile": fsdp2_memory,
    "yafsdp_compile": yafsdp_memory,
    "deepspeed": deepspeed_memory,
    "ya_fsdp": ya_fsdp_memory,
    "local": local_memory,
}
