"""Submitter side of `hydra/launcher=slurm`: one SLURM job per Hydra job, each with its own
nodes/tasks, all submitted before waiting; statuses decided from files, never raised.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from harness.config import JobConfig, config_from_dict
from harness.job.launch import interrupts_deferred
from harness.job.rerun_since import measured_in_this_rerun
from harness.job.resume import rerun_reason
from harness.job.run import Interrupted
from harness.jobdir.paths import RESULT_FILE, JobDir
from harness.jobdir.prediction import write_prediction
from harness.jobdir.result import (
    Result,
    make_result,
    read_result,
    write_json_atomic,
    write_result,
)
from harness.jobdir.result import finished_ok as _finished_ok
from harness.plan.fit import job_prediction
from harness.slurm.adopt import SLURM_RECORD, SUBMITTED, adopt
from harness.slurm.chains import ChainRunner
from harness.slurm.job_end import JobEnd, decide
from harness.slurm.resources import (
    JobShape,
    ShapeError,
    job_name,
    job_shape,
    sbatch_time_min,
    time_limit_error,
)

log = logging.getLogger(__name__)
_DEFAULTS = JobConfig()


@dataclass(kw_only=True)
class LauncherParams:
    """`hydra.launcher.*` (see sweeps/hydra/launcher/slurm.yaml)."""

    submitit_folder: str
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    exclude: str | None = None
    comment: str | None = None
    time_min: int | None = None  # None: from the job's job_timeout_s
    request_gpus: bool = True  # False on clusters without GPU GRES (CPU test clusters)
    cpus_per_task: int | None = None
    mem_gb: int | None = None  # per node
    signal_delay_s: int = 15
    kill_on_bad_exit: bool = True  # a failed rank ends the job's other ranks at once
    additional_parameters: dict[str, Any] = field(default_factory=dict)
    setup: list[str] = field(default_factory=list)
    srun_args: list[str] = field(default_factory=list)
    poll_interval_s: float = 1.0
    max_poll_interval_s: float = 15.0
    # a grid point's later jobs run on the nodes of its earlier ones (harness.slurm.chains)
    same_nodes: bool = True


@dataclass
class PlannedJob:
    idx: int
    overrides: list[str]
    sweep_config: DictConfig
    job_dir: Path
    config: dict[str, Any]  # the job's resolved config, as result.json records it
    shape: JobShape | None = None
    refusal: str | None = None
    result: Result | None = None  # final result, once known
    submitit_job: Any = None


def _job_value(cfg: DictConfig, key: str) -> Any:
    return OmegaConf.select(cfg, key, default=getattr(_DEFAULTS, key))


def _task_config(cfg: DictConfig) -> DictConfig:
    """The job's own config (what the task function gets): the composed one minus `hydra`."""
    task_cfg = copy.deepcopy(cfg)
    with open_dict(task_cfg):
        del task_cfg["hydra"]
    return task_cfg


def _preflight(task_cfg: DictConfig) -> tuple[dict[str, Any], list[str]]:
    """The job's config as result.json records it, and the harness's own refusals.

    A benchmark job (a JobConfig) gets the harness's full pre-flight here, in the
    submitter, so a config that cannot work never takes an allocation.
    """
    try:
        job_cfg = OmegaConf.to_object(task_cfg)
    except Exception as e:  # a value of the wrong type: refused like any other bad config
        return OmegaConf.to_container(task_cfg, resolve=False), [str(e)]  # type: ignore[return-value]
    if isinstance(job_cfg, JobConfig):
        from harness.validate import validation_errors

        return asdict(job_cfg), validation_errors(job_cfg, local_devices=None)
    return OmegaConf.to_container(task_cfg, resolve=True), []  # type: ignore[return-value]


def plan_job(
    hydra_context: HydraContext,
    config: DictConfig,
    params: LauncherParams,
    idx: int,
    overrides: list[str],
) -> PlannedJob:
    """Compose the job's config in the submitter: its directory and its SLURM shape."""
    sweep_config = hydra_context.config_loader.load_sweep_config(config, list(overrides))
    with open_dict(sweep_config.hydra):
        sweep_config.hydra.job.num = idx
        # The SLURM job id is not known yet; a subdir must not depend on it.
        sweep_config.hydra.job.id = f"pending_{idx}"
    job_dir = Path(str(sweep_config.hydra.sweep.dir)) / str(sweep_config.hydra.sweep.subdir)
    job_config, errors = _preflight(_task_config(sweep_config))
    job = PlannedJob(idx, list(overrides), sweep_config, job_dir, job_config)
    try:
        device = str(_job_value(sweep_config, "device"))
        job.shape = job_shape(
            int(_job_value(sweep_config, "gpus")),
            int(_job_value(sweep_config, "gpus_per_node")),
            request_gpus=params.request_gpus and device != "cpu",
        )
        timeout_s = float(_job_value(sweep_config, "job_timeout_s"))
        too_short = time_limit_error(
            time_min=params.time_min, job_timeout_s=timeout_s, signal_delay_s=params.signal_delay_s
        )
        if too_short:
            raise ShapeError(too_short)
    except ShapeError as e:  # the validation may have found the same problem: say it once
        errors = [str(e)] + [err for err in errors if err != str(e)]
    if errors:
        job.refusal = "; ".join(errors)
    return job


def _time_min(cfg: DictConfig, params: LauncherParams) -> int:
    job_timeout_s = float(_job_value(cfg, "job_timeout_s"))
    return sbatch_time_min(params.time_min, job_timeout_s, params.signal_delay_s)


def _sbatch_parameters(
    job: PlannedJob, params: LauncherParams, extra: dict[str, str] | None = None
) -> dict[str, Any]:
    assert job.shape is not None
    cfg = job.sweep_config
    srun_args = list(params.srun_args)
    if params.kill_on_bad_exit:
        srun_args.append("--kill-on-bad-exit=1")
    return {
        "job_name": job_name(job.config, fallback=str(cfg.hydra.job.name)),
        "nodes": job.shape.nodes,
        "ntasks_per_node": job.shape.tasks_per_node,
        "gpus_per_node": job.shape.gpus_per_node,
        "cpus_per_task": params.cpus_per_task,
        # mem_gb=0: --mem=0, all of each node's memory
        "mem": None if params.mem_gb is None else f"{params.mem_gb}GB" if params.mem_gb else "0",
        "time": _time_min(cfg, params),
        "partition": params.partition,
        "account": params.account,
        "qos": params.qos,
        "constraint": params.constraint,
        "exclude": params.exclude,
        "comment": params.comment,
        "signal_delay_s": params.signal_delay_s,
        # `extra`: the chain's dependency and node list (harness.slurm.chains)
        "additional_parameters": {**params.additional_parameters, **(extra or {})} or None,
        "setup": list(params.setup) or None,
        "srun_args": srun_args,
    }


def _set_aside_stale_result(job_dir: Path) -> None:
    """An earlier attempt's result.json (failed, or measured with another config) must not
    pass for this attempt's verdict; it is kept beside it (JobDir.set_aside_result)."""
    JobDir(job_dir).set_aside_result()
    JobDir(job_dir).clear_previous_attempt()


def _write_prediction(job: PlannedJob, params: LauncherParams) -> None:
    """The job's prediction.json, written once before its ranks start (on the cluster: a
    job on `device=auto` runs where the allocation puts it, on GPUs where it asks for them)."""
    cfg = config_from_dict(job.config)
    device = cfg.device if cfg.device != "auto" else ("cuda" if params.request_gpus else "cpu")
    write_prediction(job.job_dir, job_prediction(cfg, device=device))


def _write_slurm_record(job: PlannedJob, *, state: str) -> None:
    """`<job_dir>/slurm.json`: which SLURM job ran this, its shape, and where its logs are."""
    sj, shape = job.submitit_job, job.shape
    assert shape is not None
    write_json_atomic(
        job.job_dir / SLURM_RECORD,
        {
            "job_id": str(sj.job_id),
            "state": state,
            "config": job.config,  # what it was submitted with: a resume adopts only that
            "nodes": shape.nodes,
            "tasks_per_node": shape.tasks_per_node,
            "gpus_per_node": shape.gpus_per_node,
            "submission_script": str(sj.paths.submission_file),
            "stdout": str(sj.paths.stdout).replace("%t", "0"),
            "stderr": str(sj.paths.stderr).replace("%t", "0"),
        },
    )


def _job_return(job: PlannedJob) -> JobReturn:
    ret = JobReturn(
        overrides=job.overrides,
        cfg=OmegaConf.create(job.config),
        hydra_cfg=None,
        working_dir=str(job.job_dir),
        task_name=str(job.sweep_config.hydra.job.name),
        status=JobStatus.COMPLETED,
    )
    ret.return_value = job.result
    return ret


def launch_sweep(
    *,
    hydra_context: HydraContext,
    task_function: TaskFunction,
    config: DictConfig,
    params: LauncherParams,
    job_overrides: list[list[str]],
    initial_job_idx: int,
) -> list[JobReturn]:
    import submitit

    from harness.slurm.task import SlurmRankTask

    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    log.info(f"SLURM sweep output dir: {sweep_dir}")

    # Plan every job first: nothing is submitted if planning itself breaks.
    jobs = [
        plan_job(hydra_context, config, params, initial_job_idx + i, ov)
        for i, ov in enumerate(job_overrides)
    ]
    if bool(OmegaConf.select(config, "dry_run", default=False)):
        return _dry_run(hydra_context, task_function, jobs, params)

    executor = submitit.SlurmExecutor(folder=params.submitit_folder, max_num_timeout=0)
    task = SlurmRankTask(hydra_context, task_function, config)
    runner = ChainRunner(
        jobs,
        submit=lambda job, extra: _submit(job, executor, task, params, extra),
        finish=lambda job, state: _finish(job, state, params),
        same_nodes=params.same_nodes,
        poll_interval_s=params.poll_interval_s,
        max_poll_interval_s=params.max_poll_interval_s,
    )
    try:
        runner.run()  # each grid point's jobs in turn, on the same nodes
    except (KeyboardInterrupt, Interrupted) as e:
        # The person stopping the sweep wants the cluster's GPUs back, not jobs that run
        # on with nobody to record them.
        name = e.signal_name if isinstance(e, Interrupted) else "SIGINT"
        with interrupts_deferred():
            _cancel_unfinished(jobs, name)
        raise Interrupted(name) from e
    return [_job_return(job) for job in jobs]


def _dry_run(
    hydra_context: HydraContext,
    task_function: TaskFunction,
    jobs: list[PlannedJob],
    params: LauncherParams,
) -> list[JobReturn]:
    """No sbatch: each job's request is printed beside its checks and planner row."""
    from harness.slurm.dry_run import dry_run_jobs, dry_run_requests
    from harness.sweep.callbacks import active_sweep

    sweep = active_sweep()
    say = sweep.console.say if sweep is not None else print
    requests = dry_run_requests(jobs, params, lambda job: _sbatch_parameters(job, params), say)
    return dry_run_jobs(
        hydra_context=hydra_context, task_function=task_function, jobs=requests, say=say
    )


def _submit(
    job: PlannedJob,
    executor: Any,
    task: Any,
    params: LauncherParams,
    extra: dict[str, str] | None = None,
) -> None:
    """Submit one planned job, or give it its row at once (already ok, refused, sbatch error).

    A stored result stands under the local launcher's rule (harness.job.resume): ok, and
    measured with the config asked for now."""
    desc = f"#{job.idx} : {' '.join(filter_overrides(job.overrides))}"
    if job.refusal is None and job.shape is not None:
        world = job.shape.world_size
        job.submitit_job = adopt(job.job_dir, job.config, world, executor.folder, desc)
        if job.submitit_job is not None:
            return
    reason = rerun_reason(job.job_dir, job.config)
    if reason is None and (not job.config.get("rerun") or measured_in_this_rerun(job.job_dir)):
        job.result = read_result(job.job_dir / RESULT_FILE)
        log.info(f"\t{desc}: skipped, {job.job_dir / RESULT_FILE} says ok")
        return
    if reason != "no result yet":
        log.warning(f"\t{desc}: rerunning: {reason}")
    _set_aside_stale_result(job.job_dir)
    if job.refusal is not None:
        log.error(f"\t{desc}: refused before submission: {job.refusal}")
        job.result = make_result(status="invalid", config=job.config, error=job.refusal)
        write_result(job.job_dir, job.result)
        return
    _write_prediction(job, params)
    try:
        executor.update_parameters(**_sbatch_parameters(job, params, extra))
        job.submitit_job = executor.submit(
            task, job.overrides, job.idx, str(job.job_dir), Singleton.get_state()
        )
    except Exception as e:  # sbatch refused it: a row, and the sweep goes on
        log.error(f"\t{desc}: submission failed: {e}")
        job.result = make_result(
            status="failed", config=job.config, error=f"sbatch refused the job: {e}"
        )
        write_result(job.job_dir, job.result)
        return
    shape = job.shape
    assert shape is not None
    _write_slurm_record(job, state=SUBMITTED)
    log.info(
        f"\t{desc}: SLURM job {job.submitit_job.job_id}, nodes={shape.nodes} "
        f"tasks_per_node={shape.tasks_per_node} gpus_per_node={shape.gpus_per_node}"
    )


def _cancel_unfinished(jobs: list[PlannedJob], signal_name: str) -> None:
    """scancel every submitted job that has not ended, and mark it interrupted (a rerun
    resubmits it) unless its rank 0 had already written an ok result, which is kept."""
    for job in jobs:
        sj = job.submitit_job
        if sj is None or job.result is not None:
            continue
        sj.cancel(check=False)
        _write_slurm_record(job, state="CANCELLED")
        if _finished_ok(job.job_dir):
            job.result = read_result(job.job_dir / RESULT_FILE)
            continue
        job.result = make_result(
            status="interrupted",
            config=job.config,
            error=f"the sweep was interrupted ({signal_name}); SLURM job {sj.job_id} was cancelled",
        )
        write_result(job.job_dir, job.result)
        log.warning(f"#{job.idx} SLURM job {sj.job_id} cancelled: the sweep was interrupted")


def _finish(job: PlannedJob, slurm_state: str, params: LauncherParams) -> None:
    sj = job.submitit_job
    assert job.shape is not None
    world = job.shape.world_size
    task_errors: dict[int, str] = {}
    for r in range(world):
        sub = sj.task(r)
        if sub.paths.result_pickle.exists():
            try:
                sub.result()
            except Exception as e:
                task_errors[r] = str(e)
    cfg = job.sweep_config
    job_timeout_s = float(_job_value(cfg, "job_timeout_s"))
    end = JobEnd(
        slurm_job_id=str(sj.job_id),
        slurm_state=slurm_state,
        world_size=world,
        job_timeout_s=job_timeout_s,
        time_limit_min=_time_min(cfg, params),
        signal_delay_s=params.signal_delay_s,
        collective_timeout_s=float(_job_value(cfg, "collective_timeout_s")),
        task_errors=task_errors,
    )
    _write_slurm_record(job, state=slurm_state)
    result, changed = decide(job.job_dir, job.config, end)
    job.result = result
    msg = f"#{job.idx} SLURM job {sj.job_id} ended ({slurm_state}): {result.status}"
    if result.ok:
        log.info(msg)
    else:
        log.error(f"{msg}: {result.error}" + (" [result.json corrected]" if changed else ""))
