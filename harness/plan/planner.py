"""One plan row: a job's predicted memory (by class), fit, and time, from its config."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.config import JobConfig
from harness.models.shapes import shape_of
from harness.plan.collectives import Network
from harness.plan.memory import MemoryCase, MemoryEstimate, estimate_memory
from harness.plan.timing import TimeCase, TimeEstimate, estimate_time

GIB = 2**30


@dataclass(frozen=True)
class Calibration:
    """What an earlier sweep measured, in place of the profile's figures (`calibration=`):
    bus bandwidths (GB/s), and the device memory held outside the caching allocator (the
    `overhead` class; 0 without a measurement)."""

    intra_node_bus_gbps: float | None = None
    inter_node_bus_gbps: float | None = None
    outside_allocator_bytes: int | None = None
    source: str = ""


@dataclass
class PlanRow:
    cfg: JobConfig
    memory: MemoryEstimate
    fits: bool | None  # None: no device memory to check against
    min_ckpt_layers_to_fit: int | None  # None: does not fit even with every layer checkpointed
    time: TimeEstimate | None  # None: the hardware profile lacks the figures
    speedup: dict[str, float] = field(default_factory=dict)  # yafsdp rows: vs each baseline

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
            "min_ckpt_layers_to_fit": self.min_ckpt_layers_to_fit,
            "iteration_time_s": t.iteration_time_s if t else None,
            "compute_s": t.compute_s if t else None,
            "exposed_comm_s": t.exposed_comm_s if t else None,
            "other_s": t.other_s if t else None,
            "tokens_per_s_per_device": t.tokens_per_s if t else None,
            "mfu": t.mfu if t else None,
            "speedup_vs": self.speedup or None,
        }


def memory_case(
    cfg: JobConfig, ckpt_layers: int | None = None, measured: Calibration | None = None
) -> MemoryCase:
    return MemoryCase(
        model=cfg.model,
        engine=cfg.engine.label,
        world_size=cfg.gpus,
        seq_len=cfg.seq_len,
        ckpt_layers=cfg.ckpt_layers if ckpt_layers is None else ckpt_layers,
        micro_batch=cfg.micro_batch,
        dtype=cfg.dtype,
        reduce_dtype=cfg.engine.reduce_dtype,
        asynchronous=_backend(cfg) == "nccl",
        model_impl=getattr(cfg, "model_impl", "native"),
        overhead_bytes=(measured and measured.outside_allocator_bytes) or 0,
    )


def _backend(cfg: JobConfig) -> str:
    if cfg.backend != "auto":
        return cfg.backend
    return "gloo" if cfg.device == "cpu" else "nccl"


def network(cfg: JobConfig, measured: Calibration | None = None) -> Network | None:
    spec = cfg.device_spec
    intra = (measured and measured.intra_node_bus_gbps) or spec.intra_node_bus_gbps
    inter = (measured and measured.inter_node_bus_gbps) or spec.inter_node_bus_gbps
    needs_inter = cfg.gpus > cfg.gpus_per_node
    if not intra or (needs_inter and not inter):
        return None
    return Network(
        world_size=cfg.gpus,
        gpus_per_node=cfg.gpus_per_node,
        intra_bus_gbps=intra,
        inter_bus_gbps=inter or intra,
        base_latency_us=spec.collective_base_latency_us,
        intra_step_latency_us=spec.intra_node_step_latency_us,
        inter_step_latency_us=spec.inter_node_step_latency_us,
        reduce_scatter_is_all_reduce=_backend(cfg) == "gloo",
    )


def predict_time(cfg: JobConfig, measured: Calibration | None = None) -> TimeEstimate | None:
    spec = cfg.device_spec
    net = network(cfg, measured)
    if net is None or not spec.peak_tflops or not spec.compute_efficiency:
        return None
    case = TimeCase(
        model=cfg.model,
        engine=cfg.engine.label,
        world_size=cfg.gpus,
        seq_len=cfg.seq_len,
        ckpt_layers=cfg.ckpt_layers,
        micro_batch=cfg.micro_batch,
        grad_accum=cfg.grad_accum,
        dtype=cfg.dtype,
        reduce_dtype=cfg.engine.reduce_dtype,
    )
    return estimate_time(
        case,
        net,
        peak_flops=spec.peak_tflops * 1e12,
        efficiency=spec.compute_efficiency,
        memory_gbps=spec.memory_gbps,
    )


def smallest_fitting_ckpt(cfg: JobConfig, measured: Calibration | None = None) -> int | None:
    """The fewest checkpointed layers with which the job fits its device memory (a binary
    search: each checkpointed layer holds its input instead of its activations)."""
    have = cfg.device_memory_gb * GIB

    def fits(n: int) -> bool:
        return estimate_memory(memory_case(cfg, n, measured)).peak_bytes <= have

    lo, hi = 0, shape_of(cfg.model).n_layers
    if not fits(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid + 1, hi)
    return lo


def plan_row(cfg: JobConfig, measured: Calibration | None = None) -> PlanRow:
    memory = estimate_memory(memory_case(cfg, measured=measured))
    have = cfg.device_memory_gb * GIB
    fits = memory.peak_bytes <= have if have else None
    if not have:
        smallest = None
    elif fits and cfg.ckpt_layers == 0:
        smallest = 0
    else:
        smallest = smallest_fitting_ckpt(cfg, measured)
    return PlanRow(cfg, memory, fits, smallest, predict_time(cfg, measured))


def add_speedups(rows: list[PlanRow]) -> None:
    """On each yafsdp row, (T_baseline - T_yafsdp) / T_baseline for the baselines of the
    same point, as the README defines speedup."""
    from harness.engines.registry import BASELINES, YAFSDP

    def point(r: PlanRow) -> tuple:
        c = r.cfg
        return (c.model, c.gpus, c.seq_len, c.ckpt_layers, c.micro_batch, c.dtype)

    for row in rows:
        if row.cfg.engine.label != YAFSDP or row.time is None:
            continue
        for other in rows:
            label = other.cfg.engine.label
            if label in BASELINES and point(other) == point(row) and other.time is not None:
                base = other.time.iteration_time_s
                row.speedup[label] = (base - row.time.iteration_time_s) / base
