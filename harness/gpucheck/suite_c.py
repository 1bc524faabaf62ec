"""Suite C: one rank of the published world sizes, through the fake process group.

Collectives are no-ops, so values are wrong (FSDP2's loss may be NaN) but every tensor a
rank allocates is real: each engine's bytes by class are compared with `footprint`'s
arithmetic, and on CUDA the allocator's peaks over a warm-up and a timed step are
reported, with the timed step's compute-only time. The last rank is built, as it is the
one a non-divisible shard leaves short. On a machine without CUDA the same runs on CPU
with llama_small at world sizes 8 and 64.
"""

from __future__ import annotations

import functools
import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from harness.config import NAMED_BUFFER_PLANS
from harness.dtypes import DTYPES
from harness.engines.registry import spec_of
from harness.gpucheck import footprint
from harness.gpucheck.check_rows import Check, Verdict, run_check, skipped
from harness.gpucheck.training import build, release_cuda_memory, storage_bytes, train_step
from harness.jobdir.grid_point import POINT_COLUMNS, GridPoint
from harness.models.init_weights import canonical_name
from harness.models.shapes import ModelShape, get_shape
from harness.placement import synchronize
from harness.rank.memory_peaks import cuda_memory_outside_allocator

SWEEPS = Path(__file__).resolve().parents[2] / "sweeps"
EXPERIMENT = SWEEPS / "experiment" / "yafsdp_readme.yaml"
# An 80 GB card (A100/H100 80GB) holds at most 80 GiB; the usable part is a little less,
# so fits_80gib is necessary, not sufficient: fits_lent_gpu is measured on the card itself.
FIT_BYTES = 80 * 2**30
# bf16 as published; 4-token sequences, as on CPU the point is the bytes, not the speed
REDUCED_MODEL = "llama_small"
REDUCED_WORLD_SIZES = (8, 64)
REDUCED_SEQ_LEN = 4
REDUCED_CKPT_LAYERS = 1
PROVES = (
    "one rank at this world size allocates exactly the engine's per-rank bytes by class "
    "(params, grads, optimizer; YaFSDP's memory_report classes)"
)


@dataclass(frozen=True)
class Point:
    name: str
    model: str
    gpus: int
    seq_len: int
    ckpt_layers: int
    dtype: str = "bf16"


def published_points(experiment: Path = EXPERIMENT) -> tuple[list[Point], list[str]]:
    """The grid points and engines of `experiment=yafsdp_readme`, read from its files."""
    from omegaconf import OmegaConf

    params = OmegaConf.load(experiment).hydra.sweeper.params
    points = []
    for name in str(params.point).split(","):
        cfg = OmegaConf.load(SWEEPS / "point" / f"{name.strip()}.yaml")
        points.append(
            Point(
                name.strip(), str(cfg.model), int(cfg.gpus), int(cfg.seq_len), int(cfg.ckpt_layers)
            )
        )
    return points, [e.strip() for e in str(params.engine).split(",")]


def reduced_points() -> tuple[list[Point], list[str]]:
    points = []
    for p in REDUCED_WORLD_SIZES:
        fields = (REDUCED_MODEL, p, REDUCED_SEQ_LEN, REDUCED_CKPT_LAYERS)
        name = GridPoint.of(dict(zip(POINT_COLUMNS, fields, strict=True))).file_stem()
        points.append(Point(name, *fields))
    return points, ["yafsdp", "fsdp1", "fsdp2"]


def expected_bytes(
    label: str,
    shape: ModelShape,
    p: int,
    rank: int,
    *,
    param_bytes: int,
    fsdp1_units: list[list[str]] | None = None,
    yafsdp_plan: str = "min_bytes",
) -> dict[str, int]:
    """What `label` should hold on `rank` of `p` (FSDP1 needs the names in each unit; yafsdp
    the buffer plan it chose for its memory budget). The arithmetic is the adapter's: the
    labels of one adapter (fsdp2, fsdp2_tuned) lay out their bytes alike."""
    adapter = spec_of(label).name
    if adapter == "yafsdp":
        return footprint.yafsdp_bytes(shape, p, param_bytes=param_bytes, plan=yafsdp_plan)
    if adapter == "fsdp1":
        if fsdp1_units is None:
            raise ValueError("fsdp1 needs fsdp1_units: the parameter names of each FSDP unit")
        names = footprint.llama_param_shapes(shape)
        return footprint.fsdp1_bytes(footprint.fsdp1_unit_numels(fsdp1_units, names), p, rank)
    if adapter == "fsdp2":
        return footprint.fsdp2_bytes(footprint.llama_param_shapes(shape), p, rank)
    raise ValueError(f"engine {label!r} has no per-rank arithmetic; choose yafsdp, fsdp1, fsdp2")


def fsdp1_units(module: torch.nn.Module) -> list[list[str]]:
    """The full names of the parameters each FSDP1 instance flattened."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    units = []
    for name, m in module.named_modules():
        if isinstance(m, FSDP) and m._flat_param is not None:
            prefix = f"{name}." if name else ""
            units.append([canonical_name(prefix + f) for f in m._flat_param._fqns])
    return units


def byte_mismatches(got: dict[str, int], want: dict[str, int]) -> str:
    """'' when every class of `want` holds exactly its bytes in `got`, else what differs."""
    return "; ".join(
        f"{k}: {got.get(k)} B, arithmetic {v} B" for k, v in want.items() if got.get(k) != v
    )


def measured_bytes(label: str, trainee) -> dict[str, Any]:
    w, opt = trainee.wrapped, trainee.optimizer
    if spec_of(label).name == "yafsdp":
        return w.memory_breakdown(opt)
    return storage_bytes(w.params, opt)


def _gib(n: int) -> float:
    return round(n / 2**30, 3)


def measure(
    point: Point, label: str, device: torch.device, shape: ModelShape | None = None,
    *, plan: str = "auto",
) -> Verdict:  # fmt: skip
    """Build the last rank of `point` with engine `label` (yafsdp with buffer plan `plan`),
    run two steps, compare bytes."""
    shape = shape or get_shape(point.model)
    p, rank = point.gpus, point.gpus - 1
    cuda = device.type == "cuda"
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=p)
    trainee = None
    figures: dict[str, Any] = {}
    phase = "build"
    try:
        if cuda:  # retries are a running count: start it at zero for this row
            torch.cuda.init()  # the reset_* calls below do not initialise CUDA themselves
            release_cuda_memory()
            torch.cuda.reset_accumulated_memory_stats(device)
            torch.cuda.reset_peak_memory_stats(device)
        trainee = build(
            label, shape, rank=rank, world_size=p, device=device,
            seq_len=point.seq_len, ckpt_layers=point.ckpt_layers, dtype=point.dtype,
            buffer_plan=plan,
        )  # fmt: skip
        if cuda:
            figures["build_peak_gib"] = _gib(torch.cuda.max_memory_allocated(device))
            torch.cuda.reset_peak_memory_stats(device)
        phase = "step"
        if cuda:
            train_step(trainee, 0)  # warm-up: creates the optimizer state
        synchronize(device)
        start = time.perf_counter()
        train_step(trainee, 1)  # on CPU the only step: the bytes need one, not a timing
        synchronize(device)
        figures["step_s" if cuda else "first_step_s"] = round(time.perf_counter() - start, 4)
        if cuda:
            figures |= _cuda_peaks(device)
        return _bytes_verdict(point, label, shape, trainee, figures)
    except torch.OutOfMemoryError as e:
        figures |= {"fits_lent_gpu": False, "oom_in": phase}
        why = f"does not fit this GPU ({str(e).splitlines()[0]})"
        return Verdict(False, figures, why, skipped=True)
    finally:
        del trainee
        dist.destroy_process_group()
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()


def _cuda_peaks(device: torch.device) -> dict[str, Any]:
    """The allocator's peaks over the step, and whether they fit an 80 GiB and this GPU."""
    stats = torch.cuda.memory_stats(device)
    # The CUDA context and library workspaces sit beside the allocator's blocks.
    outside = cuda_memory_outside_allocator(device) or 0
    needed = stats["reserved_bytes.all.peak"] + outside
    return {
        "peak_alloc_gib": _gib(stats["allocated_bytes.all.peak"]),
        "peak_reserved_gib": _gib(stats["reserved_bytes.all.peak"]),
        "outside_allocator_gib": _gib(outside),
        "alloc_retries": int(stats.get("num_alloc_retries", 0)),
        "fits_80gib": needed <= FIT_BYTES,
        "fits_lent_gpu": needed <= torch.cuda.get_device_properties(device).total_memory,
    }


def _bytes_verdict(
    point: Point, label: str, shape: ModelShape, trainee: Any, figures: dict[str, Any]
) -> Verdict:
    """The engine's bytes by class against the arithmetic for the last rank of `point`."""
    got = measured_bytes(label, trainee)
    adapter = spec_of(label).name
    units = fsdp1_units(trainee.wrapped.module) if adapter == "fsdp1" else None
    param_bytes = torch.finfo(DTYPES[point.dtype]).bits // 8
    plan = got.get("buffer_plan", {}).get("name", "min_bytes") if adapter == "yafsdp" else ""
    want = expected_bytes(label, shape, point.gpus, point.gpus - 1, param_bytes=param_bytes,
                          fsdp1_units=units, yafsdp_plan=plan or "min_bytes")  # fmt: skip
    figures |= {f"{k}_mib": round(v / 2**20, 2) for k, v in got.items() if isinstance(v, int)}
    if plan:
        figures["buffer_plan"] = plan
    detail = byte_mismatches(got, want)
    return Verdict(not detail, figures, detail)


def run(
    device: torch.device,
    *,
    reduced: bool,
    budget_s: float = 180.0,
    on_row: Callable[[Check], None] = lambda row: None,
) -> list[Check]:
    """Every point x engine; rows past the time budget are skipped, not dropped. `on_row`
    is told of each row as it is done."""
    points, engines = reduced_points() if reduced else published_points()
    start = time.monotonic()
    rows = []
    for point in points:
        for label in engines:
            name = f"8 {point.name} {label}"
            if time.monotonic() - start > budget_s:
                why = f"suite C's {budget_s:.0f} s (what the deadline left) spent"
                row = skipped("C", name, PROVES, f"{why}; run `--suite C --deadline-s 560` alone")
            else:
                row = run_check("C", name, PROVES, functools.partial(measure, point, label, device))
            rows.append(row)
            on_row(row)
    return rows + pressure_rows(
        device, reduced=reduced, budget_s=budget_s, start=start, on_row=on_row
    )


# ---- memory pressure ------------------------------------------------------------------
# Suite C's memory-pressure rows: the caching allocator's reserved peak and its retries
# (`num_alloc_retries`) for fsdp1, fsdp2 and each yafsdp buffer plan, at one 70B-wide point
# scaled to one GPU: Llama 3 70B's width with a few layers, one rank of 256 through the fake
# process group, under an 80 GiB cap (`torch.cuda.set_per_process_memory_fraction`) where
# the card holds more. Whether fragmentation is real, and how large, is what these rows
# measure: YaFSDP's claim is that its preallocated buffers leave the allocator nothing to
# fragment. On a machine without CUDA the same rows run on CPU at llama_small's width with
# two layers: the plumbing, and every plan's bytes against `footprint`'s arithmetic.

WIDTH_MODEL, LAYERS, WORLD, SEQ_LEN = "llama3_70b", 4, 256, 4096
REDUCED_LAYERS, REDUCED_WORLD = 2, 8  # with REDUCED_MODEL and REDUCED_SEQ_LEN above
CAP_GIB = 80.0
PRESSURE_PLANS = NAMED_BUFFER_PLANS
PRESSURE_PROVES = (
    "reserved memory and allocator retries per engine and yafsdp buffer plan at a 70B-wide "
    "point under an 80 GiB cap (bytes by class equal to the arithmetic)"
)


def pressure_runs() -> list[tuple[str, str]]:
    """(engine label, yafsdp buffer plan or "auto") of every row."""
    return [("fsdp1", "auto"), ("fsdp2", "auto"), *(("yafsdp", p) for p in PRESSURE_PLANS)]


def scaled_shape(reduced: bool) -> ModelShape:
    base = get_shape(REDUCED_MODEL if reduced else WIDTH_MODEL)
    return replace(base, n_layers=REDUCED_LAYERS if reduced else LAYERS)


@contextmanager
def capped(device: torch.device, cap_gib: float = CAP_GIB) -> Iterator[float | None]:
    """The process's share of the card held to `cap_gib` (restored after); yields the
    fraction set, None on CPU or a card no larger than the cap."""
    if device.type != "cuda":
        yield None
        return
    total = torch.cuda.get_device_properties(device).total_memory
    fraction = cap_gib * 2**30 / total
    if fraction >= 1:
        yield None
        return
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    try:
        yield fraction
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, device)


def pressure_rows(device: torch.device, *, reduced: bool, budget_s: float, start: float,
                  on_row: Callable[[Check], None] = lambda row: None) -> list[Check]:  # fmt: skip
    """One row per engine and plan; rows past suite C's budget are skipped, not dropped."""
    shape = scaled_shape(reduced)
    world = REDUCED_WORLD if reduced else WORLD
    seq = REDUCED_SEQ_LEN if reduced else SEQ_LEN
    point = Point(f"{shape.name}_x{shape.n_layers}_g{world}_s{seq}", shape.name, world,
                       seq, 0)  # fmt: skip
    rows = []
    with capped(device) as fraction:
        for label, plan in pressure_runs():
            name = f"8 pressure {point.name} {label}" + (f":{plan}" if plan != "auto" else "")
            if time.monotonic() - start > budget_s:
                why = f"suite C's {budget_s:.0f} s (what the deadline left) spent"
                fix = "run `--suite C --deadline-s 560` alone"
                row = skipped("C", name, PRESSURE_PROVES, f"{why}; {fix}")
            else:
                check = functools.partial(measure, point, label, device, shape, plan=plan)
                row = run_check("C", name, PRESSURE_PROVES, check)
                if fraction is not None:
                    row.figures["cap_gib"] = CAP_GIB
            rows.append(row)
            on_row(row)
    return rows
