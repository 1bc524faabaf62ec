"""One plan row: a job's predicted memory (by class), fit, and time, from its config."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from harness.config import JobConfig
from harness.models.shapes import shape_of
from harness.plan.calibrate.calibration import Calibration
from harness.plan.constants import constants
from harness.plan.memory.allocator import AllocatorEstimate, estimate_allocator
from harness.plan.memory.model import (
    NEAR_CAPACITY,
    MemoryCase,
    MemoryEstimate,
    estimate_memory,
    moments_by_class,
    peak_of,
    yafsdp_budget,
)
from harness.plan.memory.notes import fit_verdict, memory_note
from harness.plan.time.give_way import GiveWayConstants
from harness.plan.time.network import MeasuredNetwork, NcclRing
from harness.plan.time.retry_syncs import TERM as RETRY_TERM
from harness.plan.time.retry_syncs import exposed_s, with_retry_term
from harness.plan.time.streams import resolve_torch_version
from harness.plan.time.timing import (
    CollectivePricer,
    TimeCase,
    TimeEstimate,
    describe,
    estimate_time,
)

GIB = 2**30


@dataclass
class PlanRow:
    cfg: JobConfig
    memory: MemoryEstimate
    fits: bool | None  # None: no device memory to check against
    min_ckpt_layers_to_fit: int | None  # None: does not fit even with every layer checkpointed
    time: TimeEstimate | None  # None: the hardware profile lacks the figures
    constants: dict[str, dict[str, Any]] = field(default_factory=dict)
    speedup: dict[str, float] = field(default_factory=dict)  # yafsdp rows: vs each baseline
    why: dict[str, list[str]] = field(default_factory=dict)  # yafsdp rows: vs each baseline
    allocator: AllocatorEstimate | None = None  # None: the engine's streams are not derived
    # yafsdp rows: the buffer plan its engine holds here, and its smallest plan's cost
    # (`harness.plan.yafsdp_plans.add_plans`)
    buffer_plan: str | None = None
    smallest_plan: dict[str, Any] | None = None

    def _allocator_dict(self) -> dict[str, Any] | None:
        if self.allocator is None:
            return None
        price = self.time.mechanisms.get(RETRY_TERM) if self.time else None
        return {**self.allocator.to_dict(), "retry_s": price}

    def to_dict(self) -> dict[str, Any]:
        c = self.cfg
        t = self.time
        return {
            "model": c.model,
            "gpus": c.gpus,
            "seq_len": c.seq_len,
            "ckpt_layers": c.ckpt_layers,
            "engine": c.engine.label,
            "dtype": c.dtype,
            "micro_batch": c.micro_batch,
            "peak_memory_bytes": self.memory.peak_bytes,
            "memory_bytes_by_class": self.memory.by_class,
            "peak_moment": self.memory.moment,
            "device_memory_bytes": int(c.device_memory_gb * GIB) or None,
            "fits": self.fits,
            "fit_verdict": fit_verdict(self),
            "min_ckpt_layers_to_fit": self.min_ckpt_layers_to_fit,
            "iteration_time_s": t.iteration_time_s if t else None,
            "compute_s": t.compute_s if t else None,
            "exposed_comm_s": t.exposed_comm_s if t else None,
            "other_s": t.other_s if t else None,
            "stall_s": t.stall_s if t else None,
            "comm_s": t.comm_s if t else None,
            "tokens_per_s_per_device": t.tokens_per_s if t else None,
            "mfu": t.mfu if t else None,
            **(describe(t) if t else {"breakdown": None, "mechanisms": None, "waits": None}),
            "speedup_vs": self.speedup or None,
            "why": self.why or None,
            "constants": self.constants or None,
            "allocator": self._allocator_dict(),
            "buffer_plan": self.buffer_plan,
            "smallest_plan": self.smallest_plan,
        }


def planned_label(cfg: JobConfig) -> str:
    """The registry label the planner models a job as: its own, or where the registry
    lacks it (an A/A check's second name for an engine) its adapter's own label."""
    from harness.engines.registry import ENGINES
    from harness.plan.time.timing import PLANNED_ONLY

    label = cfg.engine.label
    if label in ENGINES or label in PLANNED_ONLY or cfg.engine.name not in ENGINES:
        return label
    return cfg.engine.name


def planned_only_configs(configs: list[JobConfig]) -> list[JobConfig]:
    """Each point's jobs for the programs its `plan_engines` names (planned, never run): one
    per point and program, as the point's first job with that engine."""
    from dataclasses import replace

    from harness.config import EngineConfig
    from harness.plan.time.timing import PLANNED_ONLY

    added: dict[tuple, JobConfig] = {}
    for cfg in configs:
        for label in (s.strip() for s in cfg.plan_engines.split(",") if s.strip()):
            if label not in PLANNED_ONLY:
                raise ValueError(f"plan_engines={label!r} is not a planned program; use one of: "
                                f"{', '.join(PLANNED_ONLY)}")  # fmt: skip
            key = (label, cfg.model, cfg.gpus, cfg.seq_len, cfg.ckpt_layers, cfg.micro_batch,
                   cfg.dtype, cfg.grad_accum)  # fmt: skip
            engine = EngineConfig(name=label, label=label, reduce_dtype=cfg.engine.reduce_dtype)
            added.setdefault(key, replace(cfg, engine=engine))
    return list(added.values())


def memory_case(
    cfg: JobConfig,
    ckpt_layers: int | None = None,
    measured: Calibration | None = None,
    *,
    with_budget: bool = True,
) -> MemoryCase:
    """The job's memory case; for yafsdp with the memory budget its engine gets (the
    buffer plan is chosen for it), unless `with_budget` is off."""
    from harness.plan.time.timing import PLANNED_ONLY_MEMORY

    label = planned_label(cfg)
    case = MemoryCase(
        model=cfg.model,
        engine=PLANNED_ONLY_MEMORY.get(label, label),
        world_size=cfg.gpus,
        seq_len=cfg.seq_len,
        ckpt_layers=cfg.ckpt_layers if ckpt_layers is None else ckpt_layers,
        micro_batch=cfg.micro_batch,
        dtype=cfg.dtype,
        reduce_dtype=cfg.engine.reduce_dtype,
        asynchronous=_backend(cfg) == "nccl",
        model_impl=getattr(cfg, "model_impl", "native"),
        overhead_bytes=outside_allocator_bytes(cfg, measured),
        buffer_plan=cfg.engine.buffer_plan,
    )
    if with_budget and cfg.engine.name == "yafsdp":
        case = replace(case, memory_budget_bytes=yafsdp_memory_budget(cfg, measured=measured,
                                                                      case=case))  # fmt: skip
    return case


def outside_allocator_bytes(cfg: JobConfig, measured: Calibration | None = None) -> int:
    """Device memory the caching allocator does not hold (CUDA context, NCCL, cuBLAS): as
    measured by a calibration, else the hardware profile's public-source default."""
    if measured and measured.outside_allocator_bytes is not None:
        return measured.outside_allocator_bytes
    return int(cfg.device_spec.outside_allocator_gb * GIB)


# Held back from a rank's free memory at build: what comes after it and before the step's
# peak (NCCL's communicators, made at the first collective; cuBLAS and cuDNN workspaces),
# so that the buffer plan chosen at build never runs the allocator into retries.
BUILD_MARGIN_BYTES = 1 * GIB


def device_memory_bytes(cfg: JobConfig, device: Any = None) -> int:
    """One device's memory. On a rank building its engine (`device` a CUDA device): the
    smaller of the job's `device_memory_gb` (the hardware profile's; an "80 GB" card is
    not 80 GiB free) and what the device has free now, less `BUILD_MARGIN_BYTES`.
    Elsewhere: `device_memory_gb` where set; else, where the job runs on a GPU, that GPU's
    free memory; else this machine's RAM."""
    profile = int(cfg.device_memory_gb * GIB) if cfg.device_memory_gb > 0 else None
    if device is not None and getattr(device, "type", "") == "cuda":
        import torch

        free = int(torch.cuda.mem_get_info(device)[0]) - BUILD_MARGIN_BYTES
        return min(free, profile) if profile is not None else free
    if profile is not None:
        return profile
    import os

    from harness.placement import cuda_available, resolved

    if device is None and resolved(cfg).device == "cuda" and cuda_available():
        import torch

        return int(torch.cuda.mem_get_info(device)[0])
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def yafsdp_memory_budget(
    cfg: JobConfig,
    device: Any = None,
    measured: Calibration | None = None,
    case: MemoryCase | None = None,
) -> int | None:
    """The memory budget a yafsdp job gives its engine (`YaFSDP(memory_budget_bytes=...)`):
    `engine.memory_budget_gb` where set; else the device's memory less what the rest of the
    step is predicted to hold at its peak. The engine and the planner both use this, so
    they choose the same buffer plan."""
    if cfg.engine.name != "yafsdp":
        return None
    if cfg.engine.memory_budget_gb > 0:
        return int(cfg.engine.memory_budget_gb * GIB)
    case = case or memory_case(cfg, measured=measured, with_budget=False)
    return yafsdp_budget(replace(case, memory_budget_bytes=None), device_memory_bytes(cfg, device))


def _backend(cfg: JobConfig) -> str:
    """The backend the job's ranks will use: `auto` resolved as a rank on this machine
    resolves it (a CPU dry run is planned as gloo, not NCCL)."""
    from harness.placement import resolved

    return resolved(cfg).backend


def network(cfg: JobConfig, measured: Calibration | None = None) -> CollectivePricer | None:
    """Collectives priced from a calibration's measurement where there is one, else by
    NCCL's ring model over the hardware profile's links; None where neither is known."""
    net = cfg.device_spec.network
    run = measured.for_world(cfg.gpus) if measured else None
    if run is not None:
        return MeasuredNetwork(
            world_size=cfg.gpus,
            gpus_per_node=cfg.gpus_per_node,
            measured_world_size=run.world_size,
            measured_nodes=run.nodes,
            points=run.points,
            node_decline_per_doubling=net.node_decline_per_doubling,
            decline_from_nodes=net.decline_from_nodes,
        )
    if not net.known() or (cfg.gpus > cfg.gpus_per_node and not net.nics_per_node):
        return None
    return NcclRing(
        world_size=cfg.gpus,
        gpus_per_node=cfg.gpus_per_node,
        nvlink_channels=net.nvlink_channels,
        nvlink_channel_gbps=net.nvlink_channel_gbps,
        nics_per_node=net.nics_per_node,
        nic_gbps=net.nic_gbps,
        nic_efficiency=net.nic_efficiency,
        node_decline_per_doubling=net.node_decline_per_doubling,
        decline_from_nodes=net.decline_from_nodes,
        base_latency_us=_three(net.base_latency_us),
        nvlink_step_us=_three(net.nvlink_step_us),
        net_step_us=_three(net.net_step_us),
        net_overhead_us=net.net_overhead_us,
        ll_max_gbps=_three(net.ll_max_gbps),
        ll128_channel_gbps=net.ll128_channel_gbps,
        measured_bus_gbps=(
            ("all_gather", net.all_gather_bus_gbps),
            ("reduce_scatter", net.reduce_scatter_bus_gbps),
        ),  # fmt: skip
        measured_nodes=net.bus_measured_nodes,
    )


def _three(values: list[float]) -> tuple[float, float, float]:
    a, b, c = (float(v) for v in values)
    return a, b, c


def time_case(cfg: JobConfig, measured: Calibration | None = None) -> TimeCase:
    return TimeCase(
        model=cfg.model,
        engine=planned_label(cfg),
        world_size=cfg.gpus,
        seq_len=cfg.seq_len,
        ckpt_layers=cfg.ckpt_layers,
        micro_batch=cfg.micro_batch,
        grad_accum=cfg.grad_accum,
        dtype=cfg.dtype,
        reduce_dtype=cfg.engine.reduce_dtype,
        model_impl=getattr(cfg, "model_impl", "native"),
        memory_budget_bytes=yafsdp_memory_budget(cfg, measured=measured),
        buffer_plan=cfg.engine.buffer_plan,
        torch_version=resolve_torch_version(getattr(cfg, "torch_version", "")),
        give_way=(measured.give_way if measured else None) or GiveWayConstants(),
    )


def predict_time(
    cfg: JobConfig, measured: Calibration | None = None, *, ablate: bool = True
) -> TimeEstimate | None:
    """`ablate`: each mechanism's own cost too (a step simulated without each)."""
    spec = cfg.device_spec
    net = network(cfg, measured)
    if net is None or not spec.knows_time():
        return None
    return estimate_time(time_case(cfg, measured), spec, net, ablate=ablate)


def smallest_fitting_ckpt(cfg: JobConfig, measured: Calibration | None = None) -> int | None:
    """The fewest checkpointed layers with which the job fits its device memory, not tight
    (under NEAR_CAPACITY of it; yafsdp with the buffer plan its engine chooses at each
    count's budget); a binary search: each checkpointed layer holds its input instead of
    its activations."""
    have = cfg.device_memory_gb * GIB

    def fits(n: int) -> bool:
        return estimate_memory(memory_case(cfg, n, measured)).peak_bytes < NEAR_CAPACITY * have

    lo, hi = 0, shape_of(cfg.model).n_layers
    if not fits(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid + 1, hi)
    return lo


def retry_price_s(cfg: JobConfig, measured: Calibration | None, moments: tuple[str, ...]) -> float:
    """What the allocator's retries at `moments` add to the step: the in-flight work their
    device synchronisations expose on the engine's program (`retry_syncs.py`)."""
    from harness.plan.time.mechanisms import applicable
    from harness.plan.time.timing import build_program

    net = network(cfg, measured)
    assert net is not None, "priced only where the time is"
    on = frozenset(applicable(cfg.engine.label))
    return exposed_s(build_program(time_case(cfg, measured), cfg.device_spec, net, on), moments)


def plan_row(
    cfg: JobConfig, measured: Calibration | None = None, *, price_retries: bool = True,
    ablate: bool = True,
) -> PlanRow:  # fmt: skip
    """`price_retries`: the allocator's retries as a term of the time (its switch);
    `ablate`: each mechanism's own cost (`predict_time`)."""
    moments = moments_by_class(memory_case(cfg, measured=measured))
    memory = peak_of(moments)
    have = cfg.device_memory_gb * GIB
    fits = memory.peak_bytes <= have if have else None
    if not have:
        smallest = None
    elif cfg.ckpt_layers == 0 and memory.peak_bytes < NEAR_CAPACITY * have:
        smallest = 0
    else:
        smallest = smallest_fitting_ckpt(cfg, measured)
    time = predict_time(cfg, measured, ablate=ablate)
    allocator = estimate_allocator(moments, cfg.engine.label, int(have) or None)
    if price_retries and time is not None and allocator and allocator.retries_per_step:
        time = with_retry_term(time, retry_price_s(cfg, measured, allocator.retry_moments))
    return PlanRow(cfg, memory, fits, smallest, time, constants(cfg, measured) if time else {},
                   allocator=allocator)  # fmt: skip


def describe_row(t: TimeEstimate) -> dict[str, Any]:
    return {"iteration_time_s": t.iteration_time_s, **describe(t)}


def add_speedups(rows: list[PlanRow], *, same_ckpt: bool = True) -> None:
    """On each yafsdp row, (T_baseline - T_yafsdp) / T_baseline for the baselines of the
    same point, as the README defines speedup; `same_ckpt=False`: whatever checkpointing
    each row has (each engine at its own minimum)."""
    from harness.engines.registry import BASELINES, YAFSDP
    from harness.plan.explain import why_lines
    from harness.plan.time.timing import PLANNED_ONLY

    def point(r: PlanRow) -> tuple:
        c = r.cfg
        ckpt = c.ckpt_layers if same_ckpt else None
        return (c.model, c.gpus, c.seq_len, ckpt, c.micro_batch, c.dtype)

    for row in rows:
        own = row.cfg.engine.label
        if own not in (YAFSDP, *PLANNED_ONLY) or row.time is None:
            continue
        for other in rows:
            label = other.cfg.engine.label
            if point(other) != point(row) or other.time is None:
                continue
            if label in BASELINES:
                base = other.time.iteration_time_s
                row.speedup[label] = (base - row.time.iteration_time_s) / base
            # why-lines on yafsdp's row: against each baseline and the published program
            if own != YAFSDP or not (label in BASELINES or label in PLANNED_ONLY):
                continue
            row.why[label] = why_lines(describe_row(row.time), describe_row(other.time),
                                       label, own)  # fmt: skip
            row.why[label] += [n for r in (other, row) if (n := memory_note(r, _retry_s(r)))]


def _retry_s(row: PlanRow) -> float | None:
    return row.time.mechanisms.get(RETRY_TERM) if row.time else None
