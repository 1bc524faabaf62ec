"""After a SLURM job ends: decide its status from all ranks and fix `result.json` if needed.

Rank 0 writes result.json, but only it: a rank that fails after the last collective, a rank
killed by SLURM, or a job past its time limit would otherwise leave an `ok` (or no) result.
The submitter therefore reads every rank's outcome file plus the SLURM state (sacct) and
rewrites result.json when rank 0's verdict is missing or not the whole story. It never
touches jobs whose ok result predates the submission (those are not resubmitted at all).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.jobdir.paths import RESULT_FILE
from harness.jobdir.rank_outcome import RankOutcome, read_rank_outcomes
from harness.jobdir.result import (
    CorruptResultError,
    Result,
    make_result,
    read_result,
    write_result,
)
from harness.jobdir.verdict import Evidence, verdict, wall_clock_error
from harness.slurm.resources import SLURM_SIGNAL_EARLY_S

# What submitit raises in rank 0 when SLURM's warning signal comes before the time limit.
_WALL_CLOCK = "timed-out"


@dataclass
class JobEnd:
    """What the submitter knows about a finished SLURM job."""

    slurm_job_id: str
    slurm_state: str  # sacct State of the allocation: COMPLETED, FAILED, TIMEOUT, ...
    world_size: int
    job_timeout_s: float
    time_limit_min: int
    collective_timeout_s: float
    task_errors: dict[int, str] = field(default_factory=dict)  # from submitit, per task
    signal_delay_s: float | None = None  # the warning's --signal=USR2@<s>; None: unknown


def _last_line(text: str | None, limit: int = 500) -> str:
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1][:limit] if lines else ""


def decide(job_dir: Path, config: dict[str, Any], end: JobEnd) -> tuple[Result, bool]:
    """The job's final result and whether it differs from what rank 0 left (then it is written)."""
    job_dir = Path(job_dir)
    state = (end.slurm_state or "UNKNOWN").split()[0].upper()
    try:
        existing: Result | None = read_result(job_dir / RESULT_FILE)
        corrupt = None
    except CorruptResultError as e:
        existing = None
        corrupt = None if not (job_dir / RESULT_FILE).exists() else str(e)

    outcomes = [o for o in read_rank_outcomes(job_dir) if o.rank in range(end.world_size)]
    failed = [o for o in outcomes if not o.ok]
    missing = sorted(set(range(end.world_size)) - {o.rank for o in outcomes})

    status, error = _verdict(state, end, outcomes, missing)
    if status is None:  # every rank ok and SLURM agrees
        if existing is not None:
            return existing, False
        status = "failed"
        error = (
            corrupt
            or f"rank 0 finished without writing {RESULT_FILE} (SLURM job {end.slurm_job_id})"
        )

    if existing is not None and not existing.ok:
        # Rank 0's own verdict stands unless SLURM or another rank tells more.
        cause_elsewhere = error is not None and not error.startswith("rank 0:")
        if existing.status == status or not (cause_elsewhere or status in ("timeout", "oom")):
            return existing, False

    slurm = {
        "job_id": end.slurm_job_id,
        "state": end.slurm_state,
        "rank_failures": {str(o.rank): o.error for o in failed},
        "ranks_without_outcome": missing,
    }
    base = existing if existing is not None else make_result(status="failed", config=config)
    result = replace(base, status=status, error=error, extra={**base.extra, "slurm": slurm})
    write_result(job_dir, result)
    return result, True


def warning_error(end: JobEnd, how: str) -> str:
    """The one wording of a job ended by SLURM's warning signal, which may come up to
    SLURM_SIGNAL_EARLY_S before signal_delay_s ahead of the limit: not proof that the job
    ran for its job_timeout_s."""
    delay = "signal_delay_s" if end.signal_delay_s is None else f"{end.signal_delay_s:g} s"
    return (
        f"SLURM's warning signal (USR2, {delay} before the time limit and up to "
        f"{SLURM_SIGNAL_EARLY_S} s earlier) ended the job before its limit ({how}; "
        f"job_timeout_s={end.job_timeout_s:g})"
    )


def _verdict(
    state: str, end: JobEnd, outcomes: list[RankOutcome], missing: list[int]
) -> tuple[str | None, str | None]:
    """The shared rule (harness.jobdir.verdict) on what SLURM adds: its time limit, its
    memory kill, and the errors of tasks that never reached the harness."""
    warned = any(_WALL_CLOCK in (o.error or "") for o in outcomes)
    how = f"SLURM --time={end.time_limit_min} min, job {end.slurm_job_id}"
    wall_clock = None
    if state == "TIMEOUT":  # SLURM's own limit ended it
        wall_clock = wall_clock_error(end.job_timeout_s, how)
    elif warned:  # the warning came first, and submitit ended the job on it
        wall_clock = warning_error(end, how)
    evidence = Evidence(
        outcomes=outcomes,
        world_size=end.world_size,
        collective_timeout_s=end.collective_timeout_s,
        wall_clock=wall_clock,
    )
    decided = verdict(evidence)
    if decided is not None:
        return decided
    if state == "OUT_OF_MEMORY":
        return "oom", f"SLURM killed job {end.slurm_job_id} for exceeding its memory"
    if missing:
        texts = [end.task_errors.get(r) for r in missing]
        detail = next((_last_line(t) for t in texts if t), "")
        err = f"ranks {missing} ended without an outcome (SLURM state {state})"
        return "failed", err + (f": {detail}" if detail else "")
    return None, None  # every rank reported ok: that outweighs SLURM's view of the teardown
