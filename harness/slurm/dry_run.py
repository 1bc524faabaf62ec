"""`dry_run=true` under `hydra/launcher=slurm`: every job checked and planned as the local
launcher's dry run does, with what it would submit printed beside it (the sbatch request in
one line, its place in its grid point's chain, and the batch script as submitit would write
it), and nothing submitted (no sbatch, no submitit folder)."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

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


# The submitter's environment travels with the job (sbatch exports it): the variables that
# decide which Python and which packages the ranks get are shown.
SHOWN_ENVIRONMENT = ("VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH", "CUDA_HOME")


def sbatch_script(parameters: dict[str, Any], folder: str) -> str:
    """The batch script submitit would submit for `parameters`: #SBATCH lines, setup,
    and the srun line that starts one rank per task with this interpreter."""
    from submitit.slurm.slurm import _make_sbatch_string

    folder = str(Path(folder).absolute())  # as submitit's executor holds it
    command = " ".join([sys.executable, "-u -m submitit.core._submit", shlex.quote(folder)])
    return _make_sbatch_string(command=command, folder=folder, **parameters)


def submission_text(parameters: dict[str, Any], folder: str, chain: str) -> str:
    """What a dry run says of one job: its request, its chain, its environment, its script."""
    env = [f"{k}={os.environ[k]}" for k in SHOWN_ENVIRONMENT if os.environ.get(k)]
    script = sbatch_script(parameters, folder).strip().splitlines()
    return "\n".join([
        sbatch_request(parameters),
        chain,
        "environment: the submitter's, exported by sbatch"
        + (f" ({', '.join(env)})" if env else ""),
        "script (as submitted):",
        *(f"    {line}" for line in script),
    ])  # fmt: skip


class _Chained(Protocol):
    idx: int
    overrides: list[str]
    submitit_job: Any


def chain_lines(jobs: Sequence[_Chained], *, same_nodes: bool) -> dict[int, str]:
    """Each job's place in its grid point's chain (harness.slurm.chains), by job index."""
    from harness.slurm.chains import chains_of

    total = len(jobs)
    out = {}
    for chain in chains_of(jobs):
        for k, job in enumerate(chain):
            if k == 0:
                alone = "the only job" if len(chain) == 1 else f"1 of {len(chain)}"
                out[job.idx] = f"chain: {alone} at its grid point, submitted at once"
                continue
            before = f"[{chain[k - 1].idx + 1}/{total}]"
            nodes = " --nodelist=<its nodes>" if same_nodes else ""
            out[job.idx] = (
                f"chain: {k + 1} of {len(chain)} at its grid point, submitted once {before} "
                f"has started, with --dependency=afterany:<its job id>{nodes}"
            )
    return out


def node_notes(mem_gb: int | None, additional: dict[str, Any] | None) -> list[str]:
    """What the request leaves to the cluster's defaults that a benchmark should decide."""
    notes = []
    if "exclusive" not in (additional or {}):
        notes.append(
            "note: no --exclusive: another job may share these nodes (CPUs, memory bandwidth, "
            "network) and the timings would measure it too; for benchmarks add "
            "+hydra.launcher.additional_parameters.exclusive=true"
        )
    if mem_gb is None:
        notes.append(
            "note: no --mem: each node gets the cluster's default memory (DefMemPerNode or "
            "DefMemPerCPU, often a small share); hydra.launcher.mem_gb=0 asks for all of it"
        )
    return notes


def dry_run_requests(
    jobs: Sequence[Any],
    params: Any,
    parameters_of: Callable[[Any], dict[str, Any]],
    say: Callable[[str], None],
) -> list[tuple[int, DictConfig, str]]:
    """(index, job config, what to print) of each planned job, after the notes on what the
    request leaves to the cluster; a refused job's text says why it is not submitted."""
    for note in node_notes(params.mem_gb, params.additional_parameters):
        say(note)
    chained = chain_lines(jobs, same_nodes=params.same_nodes)
    return [
        (job.idx, job.sweep_config,
         submission_text(parameters_of(job), params.submitit_folder, chained[job.idx]))
        if job.refusal is None
        else (job.idx, job.sweep_config, f"sbatch: none, refused: {job.refusal}")
        for job in jobs
    ]  # fmt: skip


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
