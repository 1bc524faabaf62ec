"""Per-rank bytes by class that each engine should hold, from the model shape alone.

Suite C compares what the engines really allocate on one rank of a large world with these
figures. Sharded state is fp32 (master weights, their gradients, two AdamW moments);
`param_bytes` is the size of the compute dtype.

This arithmetic is kept apart from the planner's memory models (`harness.plan.memory.model`) on
purpose: the planner reads yafsdp's buffers from the engine's own code on the meta device
(so suite C would compare the engine with itself) and leaves out AdamW's step counters, and
its FSDP models put the optimizer's moments on the padded shard, where the last rank of a
world that does not divide the model holds fewer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from harness.models.shapes import ModelShape

FP32 = 4
ADAM_MOMENTS = 2  # exp_avg and exp_avg_sq


def ceil_div(n: int, p: int) -> int:
    return -(-n // p)


def local_numel(n: int, p: int, rank: int) -> int:
    """Elements of an n-element flat tensor that rank `rank` of p holds, padding excluded
    (chunks of ceil(n / p), the last ones short or empty)."""
    chunk = ceil_div(n, p)
    return max(0, min(chunk, n - rank * chunk))


def llama_param_shapes(shape: ModelShape) -> dict[str, tuple[int, ...]]:
    """Every parameter of `harness.models.llama.Llama` by name, with its shape."""
    d, hd = shape.dim, shape.head_dim
    q, kv = shape.n_heads * hd, shape.n_kv_heads * hd
    out: dict[str, tuple[int, ...]] = {"tok_embeddings.weight": (shape.vocab_size, d)}
    for i in range(shape.n_layers):
        p = f"layers.{i}."
        out |= {
            p + "attention_norm.weight": (d,),
            p + "attention.wq.weight": (q, d),
            p + "attention.wk.weight": (kv, d),
            p + "attention.wv.weight": (kv, d),
            p + "attention.wo.weight": (d, q),
            p + "ffn_norm.weight": (d,),
            p + "feed_forward.w1.weight": (shape.ffn_dim, d),
            p + "feed_forward.w2.weight": (d, shape.ffn_dim),
            p + "feed_forward.w3.weight": (shape.ffn_dim, d),
        }
    out |= {"norm.weight": (d,), "output.weight": (shape.vocab_size, d)}
    return out


def _numel(dims: tuple[int, ...]) -> int:
    n = 1
    for x in dims:
        n *= x
    return n


def yafsdp_bytes(
    shape: ModelShape, p: int, *, param_bytes: int = 2, plan: str = "min_bytes"
) -> dict[str, int]:
    """YaFSDP's `memory_report(optimizer)` byte classes on any rank, with a native
    reduce-scatter (NCCL or the fake group), units = embedding, each layer, output (norms
    resident), and the buffer plan `plan` (any of the engine's named plans)."""
    d, v = shape.dim, shape.vocab_size
    padded = lambda n: max(p, ceil_div(n, p) * p)  # noqa: E731
    layers = [shape.layer_params() - 2 * d] * shape.n_layers
    # split_vocab: each end is two units of half the vocabulary's rows (the low one the
    # larger where the vocabulary is odd), the buffers alternating as `alternating`'s
    halves = [ceil_div(v, 2) * d, v // 2 * d]
    units = [*halves, *layers, *halves] if plan == "split_vocab" else [v * d, *layers, v * d]
    res = padded(shape.n_layers * 2 * d + d)
    shards = sum(padded(n) for n in units) // p + res // p
    # the compute-dtype copy of the master the gathers read (fp32 gathers read the master)
    low_precision_gathers = shards * param_bytes if param_bytes != FP32 else 0
    # The engine's buffer plans (yafsdp_impl._plan), from the shapes: two buffers of the
    # largest unit, staging that size (alternating) or a layer's (lean_alternating: larger
    # units reduce-scattered in chunks); the embedding and output sharing one buffer with
    # the layers alternating two layer-sized ones (ends_shared), or a buffer each
    # (separate_ends). min_bytes: the first three's smallest; half_staging: min_bytes with
    # a staging of half a layer's shard per rank, rounded up.
    big, layer, ends = max(padded(n) for n in units), padded(layers[0]), padded(v * d)
    plans = {"alternating": (2 * big, big), "lean_alternating": (2 * big, layer),
             "ends_shared": (ends + 2 * layer, layer),
             "separate_ends": (2 * ends + 2 * layer, layer)}  # fmt: skip
    smallest = min(
        [plans["alternating"], plans["lean_alternating"], plans["ends_shared"]],
        key=lambda b: 2 * b[0] * param_bytes + (b[1] + b[1] // p) * FP32,
    )
    plans["min_bytes"] = smallest
    plans["half_staging"] = (smallest[0], ceil_div(layer // p, 2) * p)
    plans["split_vocab"] = plans["alternating"]  # over the split units
    buffers, staging = plans[plan]
    return {
        "weights": (buffers + res) * param_bytes,
        "grads": (buffers + res) * param_bytes,
        "master": shards * FP32 * 2,  # fp32 shards and their fp32 gradients
        # fp32 staging of one gradient buffer (or a chunk) and of the resident one, the
        # reduce-scatter outputs, and the compute-dtype copy of the master the gathers read
        "staging": (staging + res) * FP32
        + (staging // p + res // p) * FP32
        + low_precision_gathers,
        # memory_report counts every state tensor: the moments and a 4-byte fp32 step
        # counter per master parameter (one per unit and one for the resident unit)
        "optimizer": shards * FP32 * ADAM_MOMENTS + (len(units) + 1) * FP32,
    }


def fsdp1_bytes(unit_numels: Iterable[int], p: int, rank: int) -> dict[str, int]:
    """FSDP1 (FULL_SHARD, use_orig_params): per flat-parameter unit, a padded fp32 shard of
    ceil(N / p) and its gradient; AdamW state follows the original parameters' views, so
    it covers the unpadded part of the shard only."""
    units = list(unit_numels)
    shard = sum(ceil_div(n, p) for n in units) * FP32
    local = sum(local_numel(n, p, rank) for n in units) * FP32
    return {"params": shard, "grads": shard, "optimizer": local * ADAM_MOMENTS}


def fsdp2_bytes(param_shapes: Mapping[str, tuple[int, ...]], p: int, rank: int) -> dict[str, int]:
    """FSDP2 (`fully_shard`): every parameter sharded on dim 0, each rank's fp32 storage
    padded to ceil(dim0 / p) rows, gradients in the padded reduce-scatter output; AdamW
    state follows the unpadded local rows."""
    padded = local = 0
    for dims in param_shapes.values():
        row = _numel(dims[1:])
        padded += ceil_div(dims[0], p) * row
        local += local_numel(dims[0], p, rank) * row
    return {"params": padded * FP32, "grads": padded * FP32, "optimizer": local * FP32 * 2}


def fsdp1_unit_numels(
    units: Iterable[Iterable[str]], param_shapes: Mapping[str, tuple[int, ...]]
) -> list[int]:
    """Each FSDP1 unit's element count from the names of the parameters it flattened.

    Raises ValueError when the units do not cover every parameter exactly once, which would
    make the comparison meaningless."""
    seen: list[str] = []
    numels = []
    for names in units:
        names = list(names)
        seen += names
        numels.append(sum(_numel(param_shapes[n]) for n in names))
    if sorted(seen) != sorted(param_shapes):
        missing = sorted(set(param_shapes) - set(seen))[:3]
        extra = sorted({n for n in seen if seen.count(n) > 1} | (set(seen) - set(param_shapes)))
        raise ValueError(
            f"FSDP1 units do not cover the model once: missing {missing}, "
            f"repeated or unknown {extra[:3]}"
        )
    return numels
