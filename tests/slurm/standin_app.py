"""A minimal Hydra app whose job is a real gloo job of `gpus` ranks, for launcher tests.

It exercises `hydra/launcher=slurm` without the benchmark runner: every rank joins the
process group (with an explicit timeout), all-reduces for a few steps, may inject a fault,
and rank 0 writes result.json. Jobs are picked by the `case` group (one file per case).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from harness.result import make_result, write_result  # noqa: E402
from harness.slurm import register_plugin  # noqa: E402


@dataclass
class Fault:
    kind: str = "none"  # none | raise | hang
    rank: int = 1
    step: int = 1


@dataclass
class StandinConfig:
    gpus: int = 1
    gpus_per_node: int = 2
    device: str = "cpu"
    steps: int = 3
    collective_timeout_s: float = 30.0
    job_timeout_s: float = 120.0
    fault: Fault = field(default_factory=Fault)


CASES = {
    "one": {"gpus": 1},
    "two": {"gpus": 2},
    "raise": {"gpus": 2, "fault": {"kind": "raise", "rank": 1}},
    "hang": {"gpus": 2, "fault": {"kind": "hang", "rank": 1}, "collective_timeout_s": 5.0},
    "split": {"gpus": 3},  # does not split into nodes of gpus_per_node=2: refused
}

cs = ConfigStore.instance()
cs.store(name="standin", node={"defaults": ["standin_schema", {"case": "one"}, "_self_"]})
cs.store(name="standin_schema", node=StandinConfig)
for name, values in CASES.items():
    cs.store(group="case", name=name, node=values, package="_global_")

register_plugin()


def task(cfg: DictConfig) -> dict | None:
    import torch
    import torch.distributed as dist

    job_dir = Path(HydraConfig.get().runtime.output_dir)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", timeout=timedelta(seconds=cfg.collective_timeout_s))
    try:
        total = torch.zeros(1)
        for step in range(1, cfg.steps + 1):
            if cfg.fault.kind != "none" and rank == cfg.fault.rank and step == cfg.fault.step:
                if cfg.fault.kind == "raise":
                    raise RuntimeError(f"injected fault: rank {rank} raised at step {step}")
                while cfg.fault.kind == "hang":
                    time.sleep(1.0)
            t = torch.full((1,), float(rank + 1))
            dist.all_reduce(t)
            total += t
        if rank != 0:
            return None
        result = make_result(
            status="ok",
            config=OmegaConf.to_container(cfg),
            env={
                "world_size": world,
                "local_world_size": int(os.environ["LOCAL_WORLD_SIZE"]),
                "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
                "slurm_ntasks": os.environ.get("SLURM_NTASKS"),
            },
            metrics={"allreduce_total": float(total.item())},
        )
        write_result(job_dir, result)
        return result
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    hydra.main(version_base="1.3", config_path=str(REPO / "sweeps"), config_name="standin")(task)()
