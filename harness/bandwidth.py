"""Measured bus bandwidth of the job's own collectives, at its per-unit message sizes.

At a job's start (`probe_bandwidth=true`) every rank all-gathers and reduce-scatters
buffers the size of one block and of the largest unit, in the job's param and reduce
dtypes, through the same collective shim the yafsdp engine uses (gloo: a reduce-scatter is
an all-reduce). Bus bandwidth is the ring's: bytes x (P-1)/P per second, twice that for an
all-reduce. The figures go into result.json and let the planner replace the hardware
profile's (`python -m harness.plan calibration=<sweep dir>`).
"""

from __future__ import annotations

import functools
import time
from typing import Any

import torch
import torch.distributed as dist

from harness.config import JobConfig
from harness.engines.base import DTYPES
from harness.models.shapes import shape_of
from harness.plan.units import fsdp1_units
from yafsdp_impl import collectives

REPEATS = 3


def _timed(run: Any, device: torch.device) -> float:
    run()  # warm-up: connections, buffers
    best = float("inf")
    for _ in range(REPEATS):
        dist.barrier()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best


def probe_bandwidth(cfg: JobConfig, device: torch.device) -> dict[str, Any]:
    """Best-of-REPEATS bus bandwidth of each collective at each message size (GB/s)."""
    group = dist.distributed_c10d._get_default_group()
    p, rank = dist.get_world_size(), dist.get_rank()
    units = fsdp1_units(shape_of(cfg.model), p)
    gloo = not collectives.has_native_reduce_scatter(group)
    rows: dict[str, list[dict[str, float]]] = {"all_gather": [], "reduce_scatter": []}
    for numel in sorted({units.block, units.largest}):
        full = torch.empty(numel, dtype=DTYPES[cfg.dtype], device=device)
        shard = torch.empty(numel // p, dtype=full.dtype, device=device)
        gather = functools.partial(collectives.all_gather, full, shard, group, False)
        rows["all_gather"].append(
            _row(full.numel() * full.element_size(), _timed(gather, device), p, 1)
        )
        del full, shard, gather
        grads = torch.empty(numel, dtype=DTYPES[cfg.engine.reduce_dtype], device=device)
        out = None if gloo else torch.empty(numel // p, dtype=grads.dtype, device=device)
        reduce = functools.partial(collectives.reduce_scatter, out, grads, group, rank, p, False)
        rounds = 2 if gloo else 1  # gloo's reduce-scatter is an all-reduce
        rows["reduce_scatter"].append(
            _row(grads.numel() * grads.element_size(), _timed(reduce, device), p, rounds)
        )
        del grads, out, reduce
    nodes = max(1, -(-p // cfg.gpus_per_node))
    return {"backend": dist.get_backend(group), "world_size": p, "nodes": nodes, **rows}


def _row(nbytes: int, seconds: float, world_size: int, rounds: int) -> dict[str, float]:
    moved = rounds * nbytes * (world_size - 1) / world_size
    return {"bytes": nbytes, "seconds": seconds, "bus_gbps": moved / seconds / 1e9}
