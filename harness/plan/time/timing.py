"""Predicted iteration time of one job, term by term.

The model's kernels are priced one by one (`kernels.py`, `compute.py`); each engine's
program (`programs.py`, `yafsdp_program.py`) interleaves them with the engine's
collectives, priced as NCCL runs them (`network.py`), and its own kernels; the simulator
(`simulate.py`) runs the program on a host thread and the GPU's streams.

Two views of the result:
- `breakdown`: the compute stream's timeline, exactly: the time it is busy with the model's
  kernels (`compute`), with each engine term's kernels and the optimizer, and the time it
  sits idle, by what it waits for (an all-gather, a reduce-scatter, an all-reduce, the
  host, a side stream). The parts sum to the iteration time.
- `mechanisms`: each mechanism's own cost (`mechanisms.py`): the iteration time with it,
  less the iteration time without it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from harness.config import DeviceSpec
from harness.engines.registry import spec_of
from harness.models.shapes import shape_of
from harness.models.units import fsdp1_units, fsdp2_units
from harness.plan.probe import DTYPE_BYTES
from harness.plan.time.compute import ComputeModel
from harness.plan.time.cycle import cycle, give_way_detail
from harness.plan.time.give_way import GiveWayConstants
from harness.plan.time.kernels import KernelCensus, kernel_census
from harness.plan.time.mechanisms import applicable
from harness.plan.time.programs.common import ModelCosts, PartCost, StepContext, local_program
from harness.plan.time.programs.fsdp1 import fsdp1_program
from harness.plan.time.programs.fsdp2 import fsdp2_program
from harness.plan.time.simulate import (
    COMM,
    COMPUTE,
    SIDE,
    UNSHARD,
    HandOut,
    Op,
    Timeline,
    simulate,
)
from harness.plan.time.streams import resolve_torch_version, stream_priorities

# Gaps in the compute stream shorter than this are not counted as a unit waiting.
NOTABLE_WAIT_S = 1e-4


class CollectivePricer(Protocol):
    def time_s(self, kind: str, nbytes: float) -> float: ...


@dataclass(frozen=True, kw_only=True)
class TimeCase:
    model: str
    engine: str
    world_size: int
    seq_len: int
    ckpt_layers: int
    micro_batch: int = 1
    grad_accum: int = 1
    dtype: str = "bf16"
    reduce_dtype: str = "fp32"
    model_impl: str = "native"
    memory_budget_bytes: int | None = None  # yafsdp: its buffer plan is chosen for it
    buffer_plan: str = "auto"  # yafsdp: `engine.buffer_plan`
    torch_version: str = ""  # whose engine code and streams the plan models; "": installed
    give_way: GiveWayConstants = field(default_factory=GiveWayConstants)


@dataclass(frozen=True)
class TimeEstimate:
    iteration_time_s: float
    compute_s: float  # the model's kernels on the compute stream
    exposed_comm_s: float  # the compute stream waiting for collectives
    other_s: float  # the engine's own kernels and the optimizer on the compute stream
    stall_s: float  # the compute stream waiting for the host or a side stream
    comm_s: float  # every collective's time, hidden or not
    tokens_per_s: float  # per device
    mfu: float
    breakdown: dict[str, float] = field(default_factory=dict)
    mechanisms: dict[str, float] = field(default_factory=dict)
    waits: dict[str, list[str]] = field(default_factory=dict)  # cause -> units that waited
    give_way: dict[str, Any] = field(default_factory=dict)  # `cycle.give_way_detail`
    cycle: dict[str, Any] | None = None  # one steady-state backward unit (`cycle.py`)


def model_costs(
    census: KernelCensus, compute: ComputeModel, n_layers: int, case: TimeCase
) -> ModelCosts:
    def part(*phases: str) -> PartCost:
        times = [compute.phase(census, p, case.seq_len, case.micro_batch) for p in phases]
        kernels = tuple(
            (compute.kernel_s(k, case.seq_len, case.micro_batch),
             compute.kernel_waves(k, case.seq_len, case.micro_batch))
            for p in phases for k in census.phases[p]
        )  # fmt: skip
        return PartCost(sum(t.seconds for t in times), sum(t.kernels for t in times), kernels)

    block_fwd = part("block.forward")
    plain_bwd = part("block.backward")
    ckpt_bwd = part("block.forward", "block.backward")  # recomputed, then backward
    forward = [part("embedding.forward"), *[block_fwd] * n_layers,
               part("head.forward", "loss.forward")]  # fmt: skip
    backward = [
        part("embedding.backward"),
        *[ckpt_bwd if i < case.ckpt_layers else plain_bwd for i in range(n_layers)],
        part("loss.backward", "head.backward"),
    ]
    return ModelCosts(forward, backward)


@dataclass(frozen=True)
class _Priced:
    """What every program of one case shares: the model's costs and the prices."""

    costs: ModelCosts
    compute: ComputeModel


def _priced(case: TimeCase, spec: DeviceSpec) -> _Priced:
    shape = shape_of(case.model)
    census = kernel_census(case.model, case.dtype, case.model_impl)
    compute = ComputeModel(spec, DTYPE_BYTES[case.dtype])
    return _Priced(model_costs(census, compute, shape.n_layers, case), compute)


def build_program(
    case: TimeCase,
    spec: DeviceSpec,
    network: CollectivePricer,
    mechanisms: frozenset[str],
    priced: _Priced | None = None,
) -> list[Op]:
    priced = priced or _priced(case, spec)
    ctx = StepContext(
        world_size=case.world_size,
        grad_accum=case.grad_accum,
        param_bytes=DTYPE_BYTES[case.dtype],
        reduce_bytes=DTYPE_BYTES[case.reduce_dtype],
        collective_s=_memoized(network.time_s),
        memory_s=priced.compute.memory_s,
        launch_s=spec.launch_us * 1e-6,
        hook_s=spec.hook_us * 1e-6,
        mechanisms=mechanisms,
        split_bytes=case.give_way.index32_split_bytes,
    )
    if case.engine in PLANNED_ONLY:
        return PLANNED_ONLY[case.engine](case, priced.costs, ctx)
    schedule = SCHEDULES[spec_of(case.engine).label]
    return schedule(case, priced.costs, ctx)


# ---- engines: the program of one step, from the model's costs -----------------------------


def yafsdp_schedule(case: TimeCase, costs: ModelCosts, ctx: StepContext) -> list[Op]:
    """The engine's own schedule, run on the meta device (`yafsdp_program.py`)."""
    from harness.plan.time.programs.yafsdp import vocab_split_costs, yafsdp_program
    from yafsdp_impl import splits_vocab

    if splits_vocab(case.buffer_plan):
        shape = shape_of(case.model)
        costs = vocab_split_costs(costs, ctx, tokens=case.seq_len * case.micro_batch,
                                  dim=shape.dim, vocab=shape.vocab_size)  # fmt: skip
    return yafsdp_program(costs, case.model, case.dtype, case.reduce_dtype, ctx,
                          case.memory_budget_bytes, case.buffer_plan)  # fmt: skip


def fsdp1_schedule(case: TimeCase, costs: ModelCosts, ctx: StepContext) -> list[Op]:
    shape = shape_of(case.model)
    p = case.world_size
    u = fsdp1_units(shape, p)
    sizes = [u.embedding, *[u.block] * shape.n_layers, u.output]
    return fsdp1_program(costs, sizes, -(-shape.dim // p) * p, ctx)


def fsdp2_schedule(case: TimeCase, costs: ModelCosts, ctx: StepContext) -> list[Op]:
    """FSDP2 and its tuned variant alike: on a GPU both gather one group ahead."""
    shape = shape_of(case.model)
    u = fsdp2_units(shape, case.world_size)
    return fsdp2_program(costs, [u.embedding, *[u.block] * shape.n_layers, u.output], ctx)


def deepspeed_schedule(case: TimeCase, costs: ModelCosts, ctx: StepContext) -> list[Op]:
    """DeepSpeed ZeRO-3 timed as FSDP2 is (the closest schedule: a block per fetch, one
    ahead); its bucketed reduce is not modelled yet."""
    return fsdp2_schedule(case, costs, ctx)


def ya_fsdp_v1_schedule(case: TimeCase, costs: ModelCosts, ctx: StepContext) -> list[Op]:
    """Upstream YaFSDP v1 as published (`ya_fsdp_v1_program.py`): units as FSDP2's."""
    from harness.plan.time.programs.ya_fsdp_v1 import ya_fsdp_v1_program

    shape = shape_of(case.model)
    u = fsdp2_units(shape, case.world_size)
    return ya_fsdp_v1_program(costs, [u.embedding, *[u.block] * shape.n_layers, u.output], ctx)


def local_schedule(case: TimeCase, costs: ModelCosts, ctx: StepContext) -> list[Op]:
    return local_program(costs, shape_of(case.model).num_params(), ctx)


# Each registered engine label's time schedule (tests/engines/test_engine_registry.py holds
# that every label has one).
SCHEDULES: dict[str, Callable[[TimeCase, ModelCosts, StepContext], list[Op]]] = {
    "yafsdp": yafsdp_schedule,
    "fsdp1": fsdp1_schedule,
    "fsdp2": fsdp2_schedule,
    "fsdp2_tuned": fsdp2_schedule,
    # Compiled blocks are scheduled as eager ones: the kernels' fusion is not modelled.
    "fsdp2_compile": fsdp2_schedule,
    "yafsdp_compile": yafsdp_schedule,
    "deepspeed": deepspeed_schedule,
    # upstream YaFSDP groups as FSDP2 does; its own ordering is not modelled yet
    "ya_fsdp": fsdp2_schedule,
    "local": local_schedule,
}


# Programs of published code the planner plans but the harness does not run
# (`plan_engines`): each compared with the registered engines at the same points.
PLANNED_ONLY: dict[str, Callable[[TimeCase, ModelCosts, StepContext], list[Op]]] = {
    "ya_fsdp_v1": ya_fsdp_v1_schedule,
}
# ... and the registered engine whose memory model each is planned with.
PLANNED_ONLY_MEMORY = {"ya_fsdp_v1": "yafsdp"}


def _memoized(price: Any) -> Any:
    cache: dict[tuple[str, float], float] = {}

    def priced(kind: str, nbytes: float) -> float:
        key = (kind, nbytes)
        if key not in cache:
            cache[key] = price(kind, nbytes)
        return cache[key]

    return priced


def _simulate(
    case: TimeCase,
    spec: DeviceSpec,
    network: CollectivePricer,
    mechanisms: frozenset[str],
    priced: _Priced | None = None,
) -> tuple[list[Op], Timeline]:
    program = build_program(case, spec, network, mechanisms, priced)
    slowdown = 0.0
    if "nccl_sm_contention" in mechanisms and spec.sm_count > spec.nccl_sms:
        slowdown = spec.nccl_sms / (spec.sm_count - spec.nccl_sms)
    sharing = "side_stream_sharing" in mechanisms
    return program, simulate(program, overlap_slowdown=slowdown, side_sharing=sharing,
                             hand_out_rules=hand_out_rules(case, spec, mechanisms))  # fmt: skip


def hand_out_rules(case: TimeCase, spec: DeviceSpec, mechanisms: frozenset[str]) -> HandOut:
    """The SM hand-out rules for this engine at the plan's torch version."""
    constants = case.give_way
    if spec.sm_count:
        constants = replace(constants, sm_count=spec.sm_count)
    version = resolve_torch_version(case.torch_version)
    return HandOut(
        priorities=stream_priorities(case.engine, version),
        constants=constants,
        world_size=case.world_size,
        give_way="give_way" in mechanisms,
        slowest_rank="slowest_rank" in mechanisms,
        per_link="slowest_rank_per_link" in mechanisms,
    )


def estimate_time(
    case: TimeCase,
    spec: DeviceSpec,
    network: CollectivePricer,
    *,
    mechanisms: frozenset[str] | None = None,
    ablate: bool = True,
) -> TimeEstimate:
    """The step's predicted time with `mechanisms` on (every one that applies by default),
    and, with `ablate`, each one's own cost."""
    on = frozenset(applicable(case.engine)) if mechanisms is None else mechanisms
    priced = _priced(case, spec)
    program, timeline = _simulate(case, spec, network, on, priced)
    breakdown, waits = compute_stream_breakdown(program, timeline)
    total = timeline.total
    costs: dict[str, float] = {}
    if ablate:
        for m in sorted(on):
            costs[m] = total - _simulate(case, spec, network, on - {m}, priced)[1].total
    compute = breakdown.get("compute", 0.0) + breakdown.get("overlap slowdown", 0.0)
    exposed = sum(v for k, v in breakdown.items() if k.startswith("exposed "))
    stall = sum(v for k, v in breakdown.items() if k.startswith("waits for "))
    other = total - compute - exposed - stall
    shape = shape_of(case.model)
    tokens = case.micro_batch * case.seq_len * case.grad_accum
    return TimeEstimate(
        iteration_time_s=total,
        compute_s=compute,
        exposed_comm_s=exposed,
        other_s=other,
        stall_s=stall,
        comm_s=sum(op.seconds for op in program if op.stream == COMM),
        tokens_per_s=tokens / total,
        mfu=tokens / total * shape.flops_per_token(case.seq_len) / (spec.peak_tflops * 1e12),
        breakdown=breakdown,
        mechanisms=costs,
        waits=waits,
        give_way=give_way_detail(program, timeline),
        cycle=cycle(program, timeline),
    )


def compute_stream_breakdown(
    program: list[Op], timeline: Timeline
) -> tuple[dict[str, float], dict[str, list[str]]]:
    """The compute stream's timeline, busy by term and idle by cause; parts sum to the
    iteration time. Also the units whose compute waited notably, by cause."""
    by_name = {op.name: op for op in program}
    parts: dict[str, float] = {}
    waits: dict[str, list[str]] = {}

    def add(key: str, seconds: float) -> None:
        if seconds > 0:
            parts[key] = parts.get(key, 0.0) + seconds

    previous_end = 0.0
    for op in program:
        if op.stream != COMPUTE:
            continue
        start, end = timeline.start[op.name], timeline.end[op.name]
        gap = start - previous_end
        if gap > 0:
            cause = _cause(op, timeline, by_name)
            add(cause, gap)
            if gap > NOTABLE_WAIT_S and op.unit:
                waits.setdefault(cause, []).append(op.unit)
        busy = end - start
        if busy > op.seconds:  # slowed by overlapping collectives or side-stream kernels
            add("overlap slowdown", busy - op.seconds)
            busy = op.seconds
        add(op.term, busy)
        previous_end = max(previous_end, end)
    tail = timeline.total - previous_end  # the step ends when every stream has
    if tail > 0:
        last = max((op for op in program if op.stream != COMPUTE),
                   key=lambda o: timeline.end[o.name], default=None)  # fmt: skip
        add(_label(last) if last is not None else "waits for the host", tail)
    return parts, waits


def _label(op: Op) -> str:
    if op.stream == COMM:
        return f"exposed {op.kind or 'collective'}"
    if op.stream == SIDE:
        return "waits for the side stream"
    if op.stream == UNSHARD:
        return "waits for the unshard stream"
    return "waits for the host"


def _cause(op: Op, timeline: Timeline, by_name: dict[str, Op]) -> str:
    """What held a compute-stream op back: the latest of its waits, or the host."""
    latest, cause = timeline.issued[op.name], "waits for the host"
    for w in op.waits:
        if timeline.end[w] > latest:
            latest, cause = timeline.end[w], _label(by_name[w])
            if by_name[w].stream == COMPUTE:  # an event that itself waited: follow it
                cause = _cause(by_name[w], timeline, by_name)
    return cause


def describe(estimate: TimeEstimate) -> dict[str, Any]:
    """The JSON form of the terms (for result.json's prediction and the plan's rows)."""
    return {
        "breakdown": {k: round(v, 6) for k, v in estimate.breakdown.items()},
        "mechanisms": {k: round(v, 6) for k, v in estimate.mechanisms.items()},
        "waits": {k: len(v) for k, v in estimate.waits.items()},
        "give_way": estimate.give_way,
        "cycle": estimate.cycle,
    }
