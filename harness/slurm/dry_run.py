"""`dry_run=true` under `hydra/launcher=slurm`: every job checked and planned as the local
launcher's dry run does, with the sbatch request it would make printed beside it, and
nothing submitted (no sbatch, no submitit folder)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hydra.core.utils import JobReturn, run_job
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

# sbatch's flag for each of submitit's parameters that it passes as one.
_FLAGS = {
    "job_name": "--job-name",
    "nodes": "--nodes",
    "ntasks_per_node": "--ntasks-per-node",
    "gpus_per_node": "--gpus-per-node",
    "cpus_per_task": "--cpus-per-task",
    "mem": "--mem",
    "time": "--time",
    "partition": "--partition",
    "account": "--account",
    "qos": "--qos",
    "constraint": "--constraint",
    "exclude": "--exclude",
    "comment": "--comment",
}


def sbatch_request(parameters: dict[str, Any]) -> str:
    """The sbatch (and srun) options a job would be submitted with, as one line."""
    options = [f"{flag}={parameters[key]}" for key, flag in _FLAGS.items() if parameters.get(key)]
    if parameters.get("signal_delay_s"):
        options.append(f"--signal=USR2@{parameters['signal_delay_s']}")
    for key, value in (parameters.get("additional_parameters") or {}).items():
        options.append(f"--{key.replace('_', '-')}={value}")
    line = "sbatch " + " ".join(options)
    srun = parameters.get("srun_args") or []
    return line + (f"; srun {' '.join(srun)}" if srun else "")


def dry_run_jobs(
    *,
    hydra_context: HydraContext,
    task_function: TaskFunction,
    jobs: list[tuple[int, DictConfig, str]],
    say: Callable[[str], None],
) -> list[JobReturn]:
    """Run the task function of each (index, job config, sbatch request or refusal) here:
    under a dry run it only checks and plans, and starts nothing."""
    returns = []
    for idx, sweep_config, request in jobs:
        with open_dict(sweep_config.hydra):
            sweep_config.hydra.job.id = idx
            sweep_config.hydra.job.num = idx
        say(request)
        returns.append(
            run_job(
                hydra_context=hydra_context,
                task_function=task_function,
                config=sweep_config,
                job_dir_key="hydra.sweep.dir",
                job_subdir_key="hydra.sweep.subdir",
            )
        )
    return returns
