"""`python -m harness` / `yafsdp-bench`: one job, or a Hydra multirun of them.

python -m harness model=llama_tiny engine=fsdp2 gpus=2 seq_len=128 ckpt_layers=1
python -m harness -m experiment=cpu_demo
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from harness.config import JobConfig
from harness.job import run_job
from harness.slurm import register_plugin

SWEEPS_DIR = Path(__file__).resolve().parent.parent / "sweeps"

ConfigStore.instance().store(name="job_schema", node=JobConfig)
register_plugin()  # hydra/launcher=slurm, also from a source checkout


@hydra.main(version_base="1.3", config_path=str(SWEEPS_DIR), config_name="config")
def main(cfg: DictConfig) -> None:
    job_cfg: JobConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    hydra_cfg = HydraConfig.get()
    result = run_job(job_cfg, Path(hydra_cfg.runtime.output_dir))
    if result is None:  # a non-zero rank inside SLURM/torchrun
        return
    status = result["status"]
    if status == "ok" and not job_cfg.dry_run:
        m = result["metrics"]
        print(
            f"[harness] ok: iteration {m['iteration_time_s']:.4f} s (p10 "
            f"{m['iteration_time_p10_s']:.4f}, p90 {m['iteration_time_p90_s']:.4f}), "
            f"{m['tokens_per_s_per_device']:.0f} tokens/s/device, "
            f"final loss {m['losses'][-1]:.4f} -> {hydra_cfg.runtime.output_dir}/result.json"
        )
    # A single run reports failure through its exit code; a sweep goes on to the next job.
    if status != "ok" and hydra_cfg.mode == RunMode.RUN:
        sys.exit(2 if status == "invalid" else 1)
