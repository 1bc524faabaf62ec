"""One job = one grid point x one engine: validate, run its ranks, leave a result.json.

Whatever happens (invalid config, crash, hang, out of memory, an interrupted runner), the
job directory ends with a result.json that says so. A stored `ok` result is reused only
when it was measured with the same config (harness.job.resume); otherwise it is set aside as
`result.previous.json` and the job runs again.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.config import JobConfig
from harness.job.resume import rerun_reason
from harness.jobdir.paths import JobDir
from harness.jobdir.rank_outcome import (
    read_rank_exits,
    read_rank_outcomes,
    root_cause,
    unrecorded_failures,
)
from harness.jobdir.result import Result, finished_ok, make_result, read_result, write_result
from harness.validate import validation_errors


class Interrupted(BaseException):
    """The runner was told to stop (SIGINT, SIGTERM) while a job ran.

    A BaseException, like KeyboardInterrupt, so that no `except Exception` on the way (in
    Hydra or here) swallows it.
    """

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


@dataclass(frozen=True)
class JobOutcome:
    """What run_job did: the job's result, and whether it ran now or was reused/checked."""

    result: Result
    ran: bool  # False: an earlier ok result stands, or a dry run
    job_dir: Path


def in_distributed_env() -> bool:
    """True inside torchrun, a SLURM task set up by the launcher, or any RANK/WORLD_SIZE env."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def run_job(
    cfg: JobConfig,
    job_dir: Path,
    *,
    refusals: list[str] | None = None,
    on_poll: Callable[[], None] | None = None,
    say: Callable[[str], None] = print,
) -> JobOutcome:
    """Run the job (or reuse its earlier ok result) and return what happened.

    `refusals` are problems found before the config was typed (unknown fields); `on_poll`
    is called while the ranks run; `say` prints a remark (a rerun's reason).
    """
    job_dir = Path(job_dir)
    config = asdict(cfg)
    errors = list(refusals or []) + validation_errors(cfg)  # no torch import: refused at once
    if cfg.dry_run:
        predicted = None
        if not errors:
            from harness.plan.fit import (
                gpu_hours_text,
                memory_line_and_errors,
                predicted_gpu_hours,
            )

            line, errors = memory_line_and_errors(cfg)
            predicted = predicted_gpu_hours(cfg)
            if predicted is not None:
                line += f"; {gpu_hours_text(predicted, cfg.gpus)}"
            say(line)
        status = "invalid" if errors else "ok"
        metrics = {"predicted": predicted} if predicted else None
        error = "; ".join(errors) or None
        return JobOutcome(
            make_result(status=status, config=config, error=error, metrics=metrics), False, job_dir
        )
    reason = rerun_reason(job_dir, config)
    if reason is None and cfg.rerun:
        reason = "rerun=true (the ok result is kept as result.previous.json)"
    if reason is None:
        return JobOutcome(read_result(JobDir(job_dir).result), False, job_dir)
    if reason != "no result yet":
        say(f"rerunning: {reason}")
        JobDir(job_dir).set_aside_result()
    errors = errors or validation_errors(cfg, local_devices=_local_gpus(cfg))
    errors = errors or _snapshot_errors(cfg)
    if errors:
        return JobOutcome(_write_failure(cfg, job_dir, "invalid", "; ".join(errors)), True, job_dir)

    from harness.job.launch import launch_local

    JobDir(job_dir).clear_previous_attempt()
    try:
        exit_code, timed_out = launch_local(cfg, job_dir, on_poll=on_poll)
    except (KeyboardInterrupt, Interrupted) as e:
        name = e.signal_name if isinstance(e, Interrupted) else "SIGINT"
        _write_failure(cfg, job_dir, "interrupted", f"the runner was interrupted ({name})")
        raise Interrupted(name) from e
    return JobOutcome(
        decide_result(cfg, job_dir, exit_code=exit_code, timed_out=timed_out), True, job_dir
    )


def run_in_existing_env(cfg: JobConfig, job_dir: Path) -> Result | None:
    """Run this process as one rank of an environment someone else set up (SLURM, torchrun)."""
    from harness.rank.run import run_rank

    return run_rank(cfg, job_dir)


def decide_result(
    cfg: JobConfig, job_dir: Path, *, exit_code: int | None, timed_out: bool
) -> Result:
    """The job's result from what its ranks left behind."""
    outcomes = read_rank_outcomes(job_dir)
    outcomes += unrecorded_failures(outcomes, read_rank_exits(job_dir))
    cause = root_cause(outcomes, world_size=cfg.gpus)
    if cause is None and finished_ok(job_dir):
        return read_result(JobDir(job_dir).result)
    if timed_out:
        reason = f"job exceeded job_timeout_s={cfg.job_timeout_s:g} and was killed"
        if cause:
            reason += f" ({cause[1]})"
        return _write_failure(cfg, job_dir, "timeout", reason)
    if cause is not None:
        return _write_failure(cfg, job_dir, cause[0], cause[1])
    return _write_failure(
        cfg, job_dir, "failed", f"ranks exited (code {exit_code}) without writing a result"
    )


def describe(cfg: JobConfig) -> str:
    return (
        f"model={cfg.model} engine={cfg.engine.label} gpus={cfg.gpus} seq_len={cfg.seq_len} "
        f"ckpt_layers={cfg.ckpt_layers}"
    )


def _write_failure(cfg: JobConfig, job_dir: Path, status: str, error: str) -> Result:
    result = make_result(status=status, config=asdict(cfg), error=error)
    if not finished_ok(job_dir):  # rank 0 wrote ok for this attempt: a late failure elsewhere
        write_result(job_dir, result)  # is in its rank file, the measurement stands
    return result


def _snapshot_errors(cfg: JobConfig) -> list[str]:
    """memory_snapshot records CUDA's allocator: refused where the job runs on CPU."""
    if not cfg.memory_snapshot or cfg.device == "cpu":  # device=cpu: validation refuses it
        return []
    from harness.placement import resolved

    if resolved(cfg).device == "cuda":
        return []
    return [
        "memory_snapshot=true records the CUDA caching allocator's history, but this job "
        "runs on CPU (device=auto found no GPU here); drop memory_snapshot, or run on GPUs"
    ]


def _local_gpus(cfg: JobConfig) -> int | None:
    if cfg.device == "cpu":
        return None
    try:
        import torch

        from harness.placement import resolved
    except ImportError:
        return None
    if resolved(cfg).device == "cuda" or cfg.backend == "nccl":
        return torch.cuda.device_count()
    return None
