"""One job = one grid point x one engine: validate, run its ranks, leave a result.json.

Whatever happens (invalid config, crash, hang, out of memory, an interrupted runner), the
job directory ends with a result.json that says so. A stored `ok` result is reused only
when it was measured with the same config (harness.job.resume); otherwise it is set aside as
`result.previous.<n>.json` and the job runs again.
"""

from __future__ import annotations

import os
import signal
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from harness.config import JobConfig
from harness.job.failure import disk_full, full_disk_error, remove_temporaries
from harness.job.oom_kills import oom_kill_count, oom_kills_since
from harness.job.rerun_since import measured_in_this_rerun
from harness.job.resume import rerun_reason
from harness.job.strays import end_stray_attempt
from harness.jobdir.paths import JobDir
from harness.jobdir.prediction import write_prediction
from harness.jobdir.rank_outcome import (
    read_rank_exits,
    read_rank_outcomes,
    unrecorded_failures,
)
from harness.jobdir.result import Result, finished_ok, make_result, read_result, write_result
from harness.jobdir.rounds import stamp_result, utc_now
from harness.jobdir.verdict import Evidence, verdict, wall_clock_error
from harness.models.presets import config_fingerprint
from harness.plan.fit import job_prediction
from harness.validate import machine as local_machine
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
    ranks_here: bool = True,
) -> JobOutcome:
    """Run the job (or reuse its earlier ok result) and return what happened.

    `ranks_here=False`: the job's ranks would run elsewhere (a SLURM dry run, planned by
    the submitter), so this machine's GPUs, cores and memory are not checked.

    `refusals` are problems found before the config was typed (unknown fields); `on_poll`
    is called while the ranks run; `say` prints a remark (a rerun's reason). An exception
    on the way is this job's failure, recorded as its result, never the sweep's end.
    """
    job_dir = Path(job_dir)
    started = utc_now()
    try:
        outcome = _run_job(
            cfg, job_dir, refusals=refusals, on_poll=on_poll, say=say, ranks_here=ranks_here
        )
        if not outcome.ran:  # an earlier result stands, or a dry run: nothing ran now
            return outcome
        return replace(outcome, result=stamp_result(job_dir, outcome.result, started))
    except Exception as e:
        where = traceback.extract_tb(e.__traceback__)[-1]
        error = (
            f"the runner failed: {type(e).__name__}: {e} "
            f"(at {Path(where.filename).name}:{where.lineno})"
        )
        if cfg.dry_run:  # a dry run writes nothing
            return JobOutcome(make_result(status="failed", config=asdict(cfg), error=error),
                              False, job_dir)  # fmt: skip
        try:
            result = _write_failure(cfg, job_dir, "failed", error)
        except OSError:  # the directory cannot take it either: the row still says why
            result = make_result(status="failed", config=asdict(cfg), error=error)
        return JobOutcome(stamp_result(job_dir, result, started), True, job_dir)


def _run_job(
    cfg: JobConfig,
    job_dir: Path,
    *,
    refusals: list[str] | None,
    on_poll: Callable[[], None] | None,
    say: Callable[[str], None],
    ranks_here: bool,
) -> JobOutcome:
    # what an hf: config.json says now, not when the config was built
    cfg = replace(cfg, model_config_sha256=config_fingerprint(cfg.model))
    config = asdict(cfg)
    errors = list(refusals or []) + validation_errors(cfg)  # no torch import: refused at once
    if cfg.dry_run:  # planned, and checked as the run it stands for, this machine included
        return JobOutcome(_dry_run_result(cfg, errors, say, ranks_here), False, job_dir)
    reason = rerun_reason(job_dir, config)
    if reason is None and cfg.rerun and not measured_in_this_rerun(job_dir):
        reason = "rerun=true (the ok result is kept as result.previous.<n>.json)"
    if reason is None:  # an ok result outlives its attempt's processes: none to look for
        return JobOutcome(read_result(JobDir(job_dir).result), False, job_dir)
    stray = end_stray_attempt(job_dir)  # before the directory is set aside or cleared
    if stray is not None:
        say(stray)
    if reason != "no result yet":
        say(f"rerunning: {reason}")
        JobDir(job_dir).set_aside_result()
    here = local_machine.this_machine(cfg)
    errors = errors or validation_errors(cfg, machine=here)
    errors = errors or _host_memory_errors(cfg, here)
    errors = errors or _snapshot_errors(cfg)
    if errors:
        return JobOutcome(_write_failure(cfg, job_dir, "invalid", "; ".join(errors)), True, job_dir)

    from harness.job.launch import launch_local

    JobDir(job_dir).clear_previous_attempt()
    write_prediction(job_dir, job_prediction(cfg))  # once, before the ranks start
    oom_kills_before = oom_kill_count()
    try:
        exit_code, timed_out = launch_local(cfg, job_dir, on_poll=on_poll)
    except (KeyboardInterrupt, Interrupted) as e:
        name = e.signal_name if isinstance(e, Interrupted) else "SIGINT"
        _write_failure(cfg, job_dir, "interrupted", f"the runner was interrupted ({name})")
        raise Interrupted(name) from e
    result = decide_result(
        cfg,
        job_dir,
        exit_code=exit_code,
        timed_out=timed_out,
        oom_kills=oom_kills_since(oom_kills_before),
    )
    return JobOutcome(result, True, job_dir)


def _dry_run_result(
    cfg: JobConfig, errors: list[str], say: Callable[[str], None], ranks_here: bool
) -> Result:
    """A dry run's result: the planner's memory row (and GPU-hours) said, and every check
    the run would make, this machine's included where its ranks would run here."""
    predicted = None
    if not errors:
        from harness.plan.fit import gpu_hours_text, memory_line_and_errors, predicted_gpu_hours

        line, errors = memory_line_and_errors(cfg)
        predicted = predicted_gpu_hours(cfg)
        if predicted is not None:
            line += f"; {gpu_hours_text(predicted, cfg.gpus)}"
        say(line)
        if ranks_here:
            here = local_machine.this_machine(cfg)
            errors += local_machine.machine_errors(cfg, here)
            errors += _host_memory_errors(cfg, here)
    metrics = {"predicted": predicted} if predicted else None
    status = "invalid" if errors else "ok"
    return make_result(status=status, config=asdict(cfg), error="; ".join(errors) or None,
                       metrics=metrics)  # fmt: skip


def run_in_existing_env(cfg: JobConfig, job_dir: Path) -> Result | None:
    """Run this process as one rank of an environment someone else set up (SLURM, torchrun)."""
    from harness.rank.run import run_rank

    started = utc_now()
    result = run_rank(cfg, job_dir)
    return None if result is None else stamp_result(job_dir, result, started)


def decide_result(
    cfg: JobConfig,
    job_dir: Path,
    *,
    exit_code: int | None,
    timed_out: bool,
    oom_kills: int = 0,
) -> Result:
    """The job's result from what its ranks and their launcher left behind
    (harness.jobdir.verdict words it, as for SLURM jobs). `exit_code` is the rank
    launcher's (negative: the signal that killed it); `oom_kills` the kernel's OOM kills in
    the job's cgroup while it ran."""
    outcomes = read_rank_outcomes(job_dir)
    exits = read_rank_exits(job_dir)
    outcomes += unrecorded_failures(outcomes, exits)
    wall_clock = None
    if timed_out:
        wall_clock = wall_clock_error(cfg.job_timeout_s, "the runner ended it")
    evidence = Evidence(
        outcomes=outcomes,
        world_size=cfg.gpus,
        collective_timeout_s=cfg.collective_timeout_s,
        wall_clock=wall_clock,
        launcher_death=None if timed_out else launcher_death(exit_code, exits),
        oom_kills=oom_kills,
    )
    decided = verdict(evidence)
    if decided is None and finished_ok(job_dir):
        return read_result(JobDir(job_dir).result)
    if decided is not None:
        return _write_failure(cfg, job_dir, *decided)
    if disk_full(job_dir):  # nothing written, and no room to write: the likely cause
        return _write_failure(cfg, job_dir, "failed", full_disk_error(job_dir))
    return _write_failure(
        cfg, job_dir, "failed", f"ranks exited (code {exit_code}) without writing a result"
    )


def launcher_death(exit_code: int | None, exits: dict) -> str | None:
    """How the ranks' launcher (the elastic agent) died under them, if a signal killed it:
    its ranks then get SIGINT from torch and record a KeyboardInterrupt that is no cause."""
    if exit_code is None or exit_code >= 0 or exits:
        return None
    try:
        name = signal.Signals(-exit_code).name
    except ValueError:
        name = f"signal {-exit_code}"
    return f"the ranks' launcher (python -m harness.job.launch) was killed ({name})"


def _write_failure(cfg: JobConfig, job_dir: Path, status: str, error: str) -> Result:
    remove_temporaries(job_dir)  # what its ranks' interrupted writers left (a full disk)
    result = make_result(status=status, config=asdict(cfg), error=error)
    if not finished_ok(job_dir):  # rank 0 wrote ok for this attempt: a late failure elsewhere
        write_result(job_dir, result)  # is in its rank file, the measurement stands
    return result


def _host_memory_errors(cfg: JobConfig, machine: local_machine.Machine) -> list[str]:
    """Where the ranks run on this machine's CPUs, their predicted peaks must fit its RAM."""
    if not local_machine.runs_on_cpu(cfg, machine):
        return []
    from harness.plan.fit import host_memory_errors

    return host_memory_errors(cfg, machine.memory_bytes)


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
