"""Where a rank runs: its device and process-group backend, resolved from the job's
`device` and `backend` (either may be `auto`) by one rule, once, at the rank's start.
The planner resolves a job's `auto` by the same rule, so it plans what the rank runs."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from harness.config import JobConfig

if TYPE_CHECKING:
    import torch

# What a GPU is reached through: NVIDIA's driver, ROCm's, WSL's. Where none exists, torch
# sees no GPU.
GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/kfd", "/dev/dxg")


def gpu_driver_present() -> bool:
    return any(os.path.exists(node) for node in GPU_DEVICE_NODES)


def no_gpu_known_without_torch() -> bool:
    """Whether this process knows, without importing torch, that torch would see no GPU: it
    has not loaded torch (a sweep runner: 1.5 s of its start) and no GPU driver is present.
    Where torch is loaded, torch is asked (and a test's fake of it holds)."""
    return sys.modules.get("torch") is None and not gpu_driver_present()


def cuda_available() -> bool:
    """`torch.cuda.is_available()`, without importing torch where no GPU can be seen."""
    if no_gpu_known_without_torch():
        return False
    import torch

    return torch.cuda.is_available()


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on the CPU, whose ops are synchronous)."""
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def device_type(device: str, cuda_available: bool) -> str:
    """`auto` is CUDA where this machine has it, else the CPU."""
    if device == "auto":
        return "cuda" if cuda_available else "cpu"
    return device


def resolve_backend(backend: str, device_type: str) -> str:
    """The process-group backend: `auto` is NCCL on CUDA and gloo on CPU."""
    if backend == "auto":
        return "nccl" if device_type == "cuda" else "gloo"
    return backend


def resolved(cfg: JobConfig) -> JobConfig:
    """`cfg` with its device and backend as a rank on this machine resolves them."""
    return placed(cfg, device_type(cfg.device, cuda_available()))


def placed(cfg: JobConfig, device: torch.device | str) -> JobConfig:
    """`cfg` as a rank on `device` (or a device type) runs it: the device's type, the
    backend for it."""
    kind = device if isinstance(device, str) else device.type
    return replace(cfg, device=kind, backend=resolve_backend(cfg.backend, kind))


def cuda_index(backend: str, local_rank: int, device_count: int) -> int:
    """The GPU of a local rank: shared round robin under gloo, so that every engine can be
    checked with several ranks on one GPU. Under NCCL each rank has its own: the one of its
    local rank where the task sees the node's GPUs, the only one where the cluster binds a
    GPU to each task (SLURM's --gpu-bind, or cgroups: every task sees one device)."""
    if backend == "gloo":
        return local_rank % device_count
    if device_count == 1:
        return 0
    if local_rank >= device_count:
        raise RuntimeError(
            f"local rank {local_rank} has no GPU of its own: this task sees {device_count} "
            "GPUs; give each node as many GPUs as tasks (gpus_per_node) or bind one per task"
        )
    return local_rank


@dataclass(frozen=True, kw_only=True)
class Placement:
    """One rank's place: its ranks, device, backend and CPU threads."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    backend: str
    threads: int

    @classmethod
    def of_rank(cls, cfg: JobConfig, env: Mapping[str, str] = os.environ) -> Placement:
        """The placement of the rank that `env` describes (RANK, WORLD_SIZE, LOCAL_*);
        binds the rank to its GPU and sets its CPU threads."""
        import torch

        rank, world_size = int(env["RANK"]), int(env["WORLD_SIZE"])
        local_rank = int(env.get("LOCAL_RANK", 0))
        local_world = int(env.get("LOCAL_WORLD_SIZE", world_size))
        job = resolved(cfg)
        device = torch.device("cpu")
        if job.device == "cuda":
            index = cuda_index(job.backend, local_rank, torch.cuda.device_count())
            torch.cuda.set_device(index)
            device = torch.device("cuda", index)
        threads = cfg.threads_per_rank or max(1, (os.cpu_count() or 1) // local_world)
        if device.type == "cpu":
            torch.set_num_threads(threads)
        return cls(rank=rank, world_size=world_size, local_rank=local_rank,
                   local_world_size=local_world, device=device, backend=job.backend,
                   threads=threads)  # fmt: skip

    def job(self, cfg: JobConfig) -> JobConfig:
        """`cfg` as this rank runs it (what the planner is given)."""
        return placed(cfg, self.device)


def nccl_version() -> str:
    """NCCL's version, as '2.21.5'. `torch.cuda.nccl` is a submodule `import torch` does
    not load: imported here, not reached as an attribute that exists only by chance."""
    import torch.cuda.nccl as nccl

    return ".".join(map(str, nccl.version()))
