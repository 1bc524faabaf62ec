"""Which unsharded weight (and gradient) buffer each unit uses, and how big each one is.

`alternating` (YaFSDP's): two buffers sized to the largest unit; unit i uses buffer i % 2.
`ends_shared`: the first and last units (the embedding and the output projection, often
several layers in size) share one buffer of their own: they are never live together, since
the first unit's backward gathers only after the last unit's backward is done. The units
between alternate two buffers sized to the largest of them, and the staging buffer is
that size too: a larger unit is reduce-scattered through it in chunks.
`separate_ends`: as `ends_shared`, but the first and last units each keep a buffer of their
own, so the first unit stays gathered from its forward to its backward (one all-gather
fewer per step, at the step's end where nothing hides it) for one more end-sized buffer
of weights and gradients.
`lean_alternating`: as `alternating`, with a staging buffer sized to the largest layer, not
the largest unit: ends larger than a layer (Llama 3's 128k vocabulary) are reduce-scattered
through it in chunks, as `ends_shared` does. The same collectives per layer.
`half_staging`: the `min_bytes` plan with a staging buffer of half a layer: every layer is
reduce-scattered in two pieces (one more reduce-scatter per layer), for half a layer of
reduce-dtype bytes less. A mode for memory pressure.
`split_vocab`: `alternating` over a layout whose ends were split into vocabulary halves
(`split_vocab_units`: the engine splits them when this plan is named), so the buffers are
sized by the largest of a layer and half an end. Two lookups and two GEMMs of half width;
two more reduce-scatters a step (one per end) and four more all-gathers: the second
embedding half in forward and backward, the second output half, and the last layer, no
longer among the two units kept gathered into backward (one layer's bytes more a step).
Another mode for memory pressure.

`min_bytes` is the plan of `alternating`, `lean_alternating` and `ends_shared` that holds
the fewest bytes (none of them adds a collective per layer). Without a memory budget it is
chosen. With one (`choose_for_budget`), `separate_ends` where the engine's memory with it
fits the budget, else `min_bytes`; `half_staging` and `split_vocab` only when asked for by
name. `plan_buffers` is the one entry point: the engine and a planner that predicts the
engine's memory both call it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from yafsdp_impl._layout import Layout

PLANS = (
    "auto",
    "min_bytes",
    "alternating",
    "lean_alternating",
    "ends_shared",
    "separate_ends",
    "half_staging",
    "split_vocab",
)
# The plans whose layout has its ends split into vocabulary halves.
SPLIT_PLANS = ("split_vocab",)


def splits_vocab(buffer_plan: str) -> bool:
    """Whether `buffer_plan` runs on units whose ends are split into vocabulary halves
    (`split_vocab_units`): the engine splits them, and a planner must lay them out so."""
    return buffer_plan in SPLIT_PLANS


@dataclass(frozen=True, slots=True)
class BufferPlan:
    name: str
    buffer_numel: tuple[int, ...]  # each unsharded weight buffer; gradient buffers mirror it
    buffer_of: tuple[int, ...]  # unit index -> buffer index
    staging_numel: int  # reduce-dtype staging; larger units reduce-scatter in chunks

    def nbytes(self, param_bytes: int, reduce_bytes: int, world_size: int) -> int:
        """Bytes of the weight and gradient buffers, the staging and the reduce-scatter output."""
        staging = self.staging_numel + self.staging_numel // world_size
        return 2 * sum(self.buffer_numel) * param_bytes + staging * reduce_bytes

    def describe(self) -> str:
        sizes = ", ".join(str(n) for n in self.buffer_numel)
        return f"{self.name}: weight buffers of {sizes} elements, staging {self.staging_numel}"


def alternating(layout: Layout) -> BufferPlan:
    big = layout.max_padded_numel
    n = len(layout.units)
    return BufferPlan("alternating", (big, big), tuple(i % 2 for i in range(n)), big)


def _largest_layer(layout: Layout) -> int | None:
    """The largest unit between the first and the last; None without such a unit."""
    sizes = [u.padded_numel for u in layout.units]
    return max(sizes[1:-1]) if len(sizes) >= 3 else None


def lean_alternating(layout: Layout) -> BufferPlan | None:
    """None where there is no layer to size the staging by (fewer than three units)."""
    layer = _largest_layer(layout)
    if layer is None:
        return None
    plan = alternating(layout)
    return BufferPlan("lean_alternating", plan.buffer_numel, plan.buffer_of, layer)


def half_staging(layout: Layout, base: BufferPlan) -> BufferPlan | None:
    """`base` with a staging of half the largest layer, rounded up to whole elements per
    rank, so each layer's shard goes in two pieces. None without a layer."""
    layer = _largest_layer(layout)
    if layer is None:
        return None
    world = layout.resident.world_size
    chunk = -(-layer // world // 2)  # per rank: half a layer's shard, rounded up
    return BufferPlan("half_staging", base.buffer_numel, base.buffer_of, chunk * world)


def split_vocab(layout: Layout) -> BufferPlan | None:
    """None unless the layout's ends were split into vocabulary halves."""
    if not layout.vocab_split:
        return None
    plan = alternating(layout)
    return BufferPlan("split_vocab", plan.buffer_numel, plan.buffer_of, plan.staging_numel)


def ends_shared(layout: Layout) -> BufferPlan | None:
    """None where there is no middle to alternate (fewer than three units)."""
    sizes = [u.padded_numel for u in layout.units]
    if len(sizes) < 3:
        return None
    ends, middle = max(sizes[0], sizes[-1]), sizes[1:-1]
    layer = max(middle)
    n_middle_buffers = min(2, len(middle))
    buffer_of = (0, *(1 + j % 2 for j in range(len(middle))), 0)
    return BufferPlan("ends_shared", (ends, *[layer] * n_middle_buffers), buffer_of, layer)


def separate_ends(layout: Layout) -> BufferPlan | None:
    """None where there is no middle to alternate (fewer than three units)."""
    sizes = [u.padded_numel for u in layout.units]
    if len(sizes) < 3:
        return None
    middle = sizes[1:-1]
    layer = max(middle)
    n_middle_buffers = min(2, len(middle))
    buffer_of = (0, *(2 + j % 2 for j in range(len(middle))), 1)
    buffers = (sizes[0], sizes[-1], *[layer] * n_middle_buffers)
    return BufferPlan("separate_ends", buffers, buffer_of, layer)


def choose_plan(
    layout: Layout, choice: str, *, param_bytes: int, reduce_bytes: int, world_size: int
) -> BufferPlan:
    if choice not in PLANS:
        raise ValueError(f"buffer_plan={choice!r} is unknown; choose one of {', '.join(PLANS)}")
    if (choice in SPLIT_PLANS) != layout.vocab_split:
        raise ValueError(
            f"buffer_plan={choice!r} needs a layout whose ends are "
            f"{'split' if choice in SPLIT_PLANS else 'whole'}: split them with "
            "split_vocab_units for split_vocab alone"
        )
    if choice == "alternating":
        return alternating(layout)
    if choice == "split_vocab":
        return split_vocab(layout)  # type: ignore[return-value]  # vocab_split: not None
    smallest = min(
        [p for p in (alternating(layout), lean_alternating(layout), ends_shared(layout)) if p],
        key=lambda p: p.nbytes(param_bytes, reduce_bytes, world_size),
    )  # the first of equals: alternating where the ends are no larger than a layer
    named = {
        "min_bytes": smallest,
        "lean_alternating": lean_alternating(layout),
        "ends_shared": ends_shared(layout),
        "separate_ends": separate_ends(layout),
        "half_staging": half_staging(layout, smallest),
    }
    plan = named[choice]
    if plan is None:
        raise ValueError(f"buffer_plan={choice!r} needs at least three units")
    return plan


@dataclass(frozen=True, slots=True)
class PlanChoice:
    """The plan chosen for a memory budget, and the one it was chosen over."""

    plan: BufferPlan
    rejected: BufferPlan | None
    budget_bytes: int | None
    plan_bytes: int  # the engine's memory with the plan (see `engine_bytes`)
    rejected_bytes: int | None
    # the plan holding the fewest bytes the engine can run with its ends whole
    # (`half_staging`, where there is a layer; on a split layout, the plan itself), and the
    # engine's memory with it: what the chosen plan spends beyond need
    smallest: BufferPlan | None = None
    smallest_bytes: int | None = None


def engine_bytes(
    layout: Layout, plan: BufferPlan, *, param_bytes: int, reduce_bytes: int, native: bool
) -> int:
    """Every byte the engine allocates with `plan` (`Buffers.bytes_by_class`, summed):
    the weight and gradient buffers and the resident unit's, the staging and reduce-scatter
    outputs, the fp32 master shards and their gradients, the param-dtype copy of them."""
    p, r, world = param_bytes, reduce_bytes, layout.resident.world_size
    res, res_shard = layout.resident.padded_numel, layout.resident.shard_numel
    shards = layout.master_numel + res_shard
    weights_and_grads = 2 * (sum(plan.buffer_numel) + res) * p
    staging = (plan.staging_numel + res) * r
    if native:
        staging += (plan.staging_numel // world + res_shard) * r
    master = 2 * shards * 4
    gather_source = shards * p if p != 4 else 0
    return weights_and_grads + staging + master + gather_source


def choose_for_budget(
    layout: Layout, budget_bytes: int | None, *, param_bytes: int, reduce_bytes: int,
    native: bool,
) -> PlanChoice:  # fmt: skip
    """`separate_ends` where the engine's memory with it fits `budget_bytes`, else the
    plan holding fewer bytes (`min_bytes`); without a budget, `min_bytes`. `half_staging`
    is taken only by name. `rejected` is the next roomier plan (or, for the roomiest, the
    next smaller one)."""
    world = layout.resident.world_size
    small = choose_plan(layout, "min_bytes", param_bytes=param_bytes,
                        reduce_bytes=reduce_bytes, world_size=world)  # fmt: skip
    roomy, tight = separate_ends(layout), half_staging(layout, small)

    def size(plan: BufferPlan) -> int:
        return engine_bytes(layout, plan, param_bytes=param_bytes, reduce_bytes=reduce_bytes,
                            native=native)  # fmt: skip

    def choice(plan: BufferPlan, over: BufferPlan | None) -> PlanChoice:
        return PlanChoice(plan, over, budget_bytes, size(plan), size(over) if over else None)

    if roomy is None or tight is None:
        return choice(small, None)
    if budget_bytes is None:
        return choice(small, roomy)
    if size(roomy) <= budget_bytes:
        return choice(roomy, small)
    # Never `half_staging` unasked: its extra reduce-scatter per layer is a cost that a
    # budget (a share of the device, not the device) should not impose on its own.
    return choice(small, roomy)


def plan_buffers(
    layout: Layout,
    buffer_plan: str,
    budget_bytes: int | None,
    *,
    param_bytes: int,
    reduce_bytes: int,
    native_reduce_scatter: bool,
) -> PlanChoice:
    """The buffer plan the engine holds for `layout` (what `YaFSDP(buffer_plan=...,
    memory_budget_bytes=...)` chooses): "auto" chooses for the budget (`choose_for_budget`);
    a plan by name is taken as named, with its bytes and the budget recorded beside it.
    Element sizes are in bytes; `native_reduce_scatter` is False on gloo (no reduce-scatter
    output buffers)."""
    p, r, world = param_bytes, reduce_bytes, layout.resident.world_size
    if buffer_plan == "auto":
        choice = choose_for_budget(
            layout, budget_bytes, param_bytes=p, reduce_bytes=r, native=native_reduce_scatter
        )
    else:
        plan = choose_plan(layout, buffer_plan, param_bytes=p, reduce_bytes=r, world_size=world)
        size = engine_bytes(layout, plan, param_bytes=p, reduce_bytes=r,
                            native=native_reduce_scatter)  # fmt: skip
        choice = PlanChoice(plan, None, budget_bytes, size, None)
    if layout.vocab_split:  # the other plans hold whole ends: none to compare with here
        return replace(choice, smallest=choice.plan, smallest_bytes=choice.plan_bytes)
    smallest = half_staging(layout, choose_plan(layout, "min_bytes", param_bytes=p,
                                                reduce_bytes=r, world_size=world))  # fmt: skip
    if smallest is None:
        return replace(choice, smallest=choice.plan, smallest_bytes=choice.plan_bytes)
    size = engine_bytes(layout, smallest, param_bytes=p, reduce_bytes=r,
                        native=native_reduce_scatter)  # fmt: skip
    return replace(choice, smallest=smallest, smallest_bytes=size)
