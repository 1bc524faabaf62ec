"""The callable that submitit runs in every SLURM task: one rank of one Hydra job."""

from __future__ import annotations

import logging
import traceback
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, run_job, setup_globals
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

from harness.jobdir.paths import JobDir
from harness.jobdir.rank_outcome import read_rank_outcome, write_rank_outcome
from harness.slurm import ensure_plugin_importable
from harness.slurm.rank import export_rank_env
from harness.sweep import job_dirname  # the job directory's resolver, where Hydra runs the job

job_dirname.register()

log = logging.getLogger(__name__)
ensure_plugin_importable()


class RankFailed(RuntimeError):
    """Raised at the end of a failed rank so that its process exits non-zero (srun then
    ends the job's other tasks, and submitit records the error)."""


class SlurmRankTask:
    """Pickled by submitit; runs the Hydra task function as one rank of the job.

    Deliberately has no `checkpoint` method: a timed-out benchmark must not be requeued.
    """

    def __init__(
        self, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.hydra_context = hydra_context
        self.task_function = task_function
        self.config = config

    def __call__(
        self,
        overrides: list[str],
        job_num: int,
        job_dir: str,
        singleton_state: dict[Any, Any],
    ) -> JobReturn:
        import submitit

        rank, _world = export_rank_env()
        Singleton.set_state(singleton_state)
        setup_globals()
        sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        with open_dict(sweep_config.hydra):
            sweep_config.hydra.job.id = submitit.JobEnvironment().job_id
            sweep_config.hydra.job.num = job_num
            if rank != 0:
                # Only rank 0 writes the job's files; the others log beside their outcome.
                sweep_config.hydra.output_subdir = None
                handlers = sweep_config.hydra.job_logging.get("handlers") or {}
                if "file" in handlers and "filename" in handlers["file"]:
                    handlers["file"]["filename"] = str(JobDir(job_dir).rank_log(rank))
                    JobDir(job_dir).ranks.mkdir(parents=True, exist_ok=True)
        job_path = Path(job_dir)
        try:
            ret = run_job(
                hydra_context=self.hydra_context,
                task_function=self.task_function,
                config=sweep_config,
                job_dir_key="hydra.sweep.dir",
                job_subdir_key="hydra.sweep.subdir",
            )
        except BaseException as e:  # failures outside the task function (Hydra itself)
            _record(job_path, rank, e)
            raise
        if ret.status == JobStatus.COMPLETED:
            _record(job_path, rank, None)
            return ret
        exc = ret._return_value
        _record(job_path, rank, exc)
        raise RankFailed(f"rank {rank}: {type(exc).__name__}: {exc}") from exc


def _record(job_dir: Path, rank: int, error: BaseException | None) -> None:
    """Leave the rank's outcome unless the worker already wrote one during this attempt
    (the submitter cleared older ones), keeping the worker's failure over a later ok."""
    path = JobDir(job_dir).rank_outcome(rank)
    if path.exists() and (error is None or _recorded_failure(path)):
        return
    trace = "".join(traceback.format_exception(error)) if error is not None else ""
    write_rank_outcome(job_dir, rank, error=error, trace=trace)


def _recorded_failure(path: Path) -> bool:
    outcome = read_rank_outcome(path)
    return outcome is not None and not outcome.ok
