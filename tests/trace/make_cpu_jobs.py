"""Write two small CPU job directories with real 2-rank gloo profiler traces.

    python tests/trace/make_cpu_jobs.py <out_dir>

Two toy engines train the same MLP: `blocking` all-reduces the gradients after backward
(communication never overlaps), `overlapped` issues one asynchronous all-reduce per layer as
soon as its gradient is ready, under yafsdp-style annotations. Each job directory gets
traces/rank<r>.json.gz (from harness.rank.profiling.capture_profile) and a result.json whose
`profile` comes from harness.trace.summarize_job.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import record_function

from harness.jobdir.result import make_result, write_result
from harness.ports import free_port
from harness.rank.profiling import capture_profile
from harness.trace import summarize_job

ENGINES = {"blocking": "toy blocking all-reduce", "overlapped": "toy per-layer async all-reduce"}
WORLD = 2


def _model() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(384, 384) for _ in range(6)])


def _step_fn(engine: str, model: torch.nn.Sequential, x: torch.Tensor):
    pending: list = []
    if engine == "overlapped":
        for unit, layer in enumerate(model):
            for p in layer.parameters():

                def hook(p: torch.Tensor, unit: int = unit) -> None:
                    with record_function(f"yafsdp.reduce_scatter.unit{unit}"):
                        pending.append(dist.all_reduce(p.grad, async_op=True))

                p.register_post_accumulate_grad_hook(hook)

    def step(_: int) -> None:
        h = x
        for unit, layer in enumerate(model):
            with record_function(f"yafsdp.forward.unit{unit}"):
                h = torch.relu(layer(h))
        h.sum().backward()
        if engine == "blocking":
            for p in model.parameters():
                dist.all_reduce(p.grad)
        for work in pending:
            work.wait()
        pending.clear()
        model.zero_grad(set_to_none=True)

    return step


def _rank(rank: int, out_dir: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    x = torch.randn(128, 384, generator=torch.Generator().manual_seed(rank))
    for engine, label in ENGINES.items():
        job_dir = Path(out_dir) / engine
        step = _step_fn(engine, _model(), x)
        capture_profile(
            step, steps=2, warmup=1, out_dir=job_dir, rank=rank, world_size=WORLD, use_cuda=False
        )
        dist.barrier()
        if rank == 0:
            config = {"engine": {"name": engine, "label": label}, "gpus": WORLD}
            write_result(
                job_dir,
                make_result(status="ok", config=config, profile=summarize_job(job_dir)),
            )
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(_rank, args=(sys.argv[1], free_port()), nprocs=WORLD)
