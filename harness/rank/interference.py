"""What else loaded the machine while a job's timed steps ran: result.json
`metrics.interference`, read by the report without torch.

    cpus               logical CPUs of the job's nodes, summed
    timed_s            wall time of the timed steps (rank 0's window)
    own_cpu_s          CPU time this job's ranks took in it
    other_cpu_s        CPU time every other process on those nodes took in it: the nodes'
                       busy time (/proc/stat) less the ranks' own (the job's launcher and
                       elastic agent count as others; they sleep while ranks run)
    other_cpu_share    other_cpu_s / (cpus * timed_s): the fraction of the machine others had
    load1_start, load1_end   rank 0's node's 1-minute load average at either end
    gpu                on CUDA: SM clock (min/median/max over the ranks' samples, one per
                       step), throttle reasons seen on any rank, the most processes and
                       memory of other processes seen on one device (the memory None, with
                       pid_namespace "foreign", where a container hides which are ours);
                       or why not measured

Without /proc (not Linux) the CPU fields are null.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from harness.rank import host_usage
from harness.rank.nvml_watch import GpuWatch, throttle_names

_GPU_FIELDS = ("sm_clock_mhz_min", "sm_clock_mhz_median", "sm_clock_mhz_max", "other_processes",
               "other_memory_bytes")  # fmt: skip


@dataclass
class Window:
    """Readings at the start of the timed steps, completed by `stop`."""

    started: float
    node_busy_s: float | None
    own_cpu_s: float
    load1_start: float | None
    gpu: GpuWatch | None
    wall_s: float = 0.0
    node_busy_delta_s: float | None = None
    own_delta_s: float = 0.0
    load1_end: float | None = None

    @classmethod
    def start(cls, gpu: GpuWatch | None = None) -> Window:
        if gpu is not None:
            gpu.sample()
        return cls(time.perf_counter(), host_usage.node_busy_s(), host_usage.own_cpu_s(),
                   host_usage.load_average_1m(), gpu)  # fmt: skip

    def after_step(self) -> None:
        """A GPU sample after each timed step (outside its timer)."""
        if self.gpu is not None:
            self.gpu.sample()

    def stop(self) -> Window:
        self.wall_s = time.perf_counter() - self.started
        busy = host_usage.node_busy_s()
        if busy is not None and self.node_busy_s is not None:
            self.node_busy_delta_s = busy - self.node_busy_s
        self.own_delta_s = host_usage.own_cpu_s() - self.own_cpu_s
        self.load1_end = host_usage.load_average_1m()
        return self


def open_gpu_watch(device: torch.device, local_world: int) -> GpuWatch | None:
    """A watch over this rank's GPU, knowing this job's PIDs (every rank's, gathered)."""
    if device.type != "cuda":
        return None
    pids = torch.tensor([os.getpid()], dtype=torch.int64, device=device)
    gathered = [torch.zeros_like(pids) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, pids)
    own = frozenset(int(p.item()) for p in gathered)
    ranks_here = max(1, local_world // max(1, torch.cuda.device_count()))
    return GpuWatch.open(device.index or 0, own, ranks_here)


def reduce_interference(window: Window, device: torch.device, local_rank: int) -> dict[str, Any]:
    """The job's record: CPU times summed over ranks (node figures once per node, from its
    local rank 0), GPU figures reduced to their extremes. A collective: every rank calls it."""
    first_on_node = local_rank == 0
    node_busy = window.node_busy_delta_s
    sums = torch.tensor(
        [window.own_delta_s, (node_busy or 0.0) if first_on_node else 0.0,
         float(host_usage.node_cpus()) if first_on_node else 0.0,
         1.0 if node_busy is None else 0.0],
        dtype=torch.float64, device=device,
    )  # fmt: skip
    dist.all_reduce(sums)
    own, busy, cpus, missing = sums.tolist()
    record: dict[str, Any] = {"cpus": int(cpus), "timed_s": window.wall_s, "own_cpu_s": own}
    if missing:  # some node without /proc/stat
        record.update(other_cpu_s=None, other_cpu_share=None)
    else:
        other = max(0.0, busy - own)  # a tick's rounding can make it a hair negative
        capacity = cpus * window.wall_s
        record.update(other_cpu_s=other, other_cpu_share=other / capacity if capacity else None)
    record.update(load1_start=window.load1_start, load1_end=window.load1_end)
    if window.gpu is not None:
        record["gpu"] = _reduce_gpu(window.gpu.summary(), device)
    return record


def _reduce_gpu(mine: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """Min of the minima, max of the rest (medians: the largest rank's), throttle bits OR-ed;
    a rank without samples makes the job's record say so."""
    have = "unavailable" not in mine
    # a rank in another PID namespace cannot tell the others' memory: then nor can the job
    memory_unknown = have and mine.get("other_memory_bytes", 0) is None
    values = [float(mine.get(f) or 0.0) for f in _GPU_FIELDS]
    values[0] = -values[0]  # MAX of the negated minimum is the minimum
    bits = [float(bool(mine.get("throttle_mask", 0) & (1 << b))) for b in range(16)]
    packed = torch.tensor([0.0 if have else 1.0, float(memory_unknown), *values, *bits],
                          dtype=torch.float64, device=device)  # fmt: skip
    dist.all_reduce(packed, op=dist.ReduceOp.MAX)
    flat = packed.tolist()
    if flat[0]:
        return {"unavailable": mine.get("unavailable") or "no sample on some rank"}
    reduced = dict(zip(_GPU_FIELDS, flat[2 : 2 + len(_GPU_FIELDS)], strict=True))
    reduced["sm_clock_mhz_min"] = -reduced["sm_clock_mhz_min"]
    mask = sum(1 << b for b, bit in enumerate(flat[2 + len(_GPU_FIELDS) :]) if bit)
    return {
        **reduced,
        "other_processes": int(reduced["other_processes"]),
        "other_memory_bytes": None if flat[1] else int(reduced["other_memory_bytes"]),
        **({"pid_namespace": "foreign"} if flat[1] else {}),
        "throttle_reasons": throttle_names(mask),
    }
