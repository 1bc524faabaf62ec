"""After a SLURM job ends: decide its status from all ranks and fix `result.json` if needed.

Rank 0 writes result.json, but only it: a rank that fails after the last collective, a rank
killed by SLURM, or a job past its time limit would otherwise leave an `ok` (or no) result.
The submitter therefore reads every rank's outcome file plus the SLURM state (sacct) and
rewrites result.json when rank 0's verdict is missing or not the whole story. It never
touches jobs whose ok result predates the submission (those are not resubmitted at all).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.result import RESULT_FILE, CorruptResultError, make_result, read_result, write_result
from harness.slurm.rank import read_rank_outcomes

# Errors a rank reports because another rank went away first: never the root cause.
_SECONDARY = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "socket closed",
    "nccl communicator was aborted",
)


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


def _first_line(text: str | None, limit: int = 500) -> str:
    text = (text or "").strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    # A traceback's last line names the exception; anything else: its first line.
    line = lines[-1] if lines and lines[0].startswith("Traceback") else (lines[0] if lines else "")
    return line[:limit]


def _is_secondary(error: str | None) -> bool:
    low = (error or "").lower()
    return any(s in low for s in _SECONDARY)


def decide(job_dir: Path, config: dict[str, Any], end: JobEnd) -> tuple[dict[str, Any], bool]:
    """The job's final result and whether it differs from what rank 0 left (then it is written)."""
    job_dir = Path(job_dir)
    state = (end.slurm_state or "UNKNOWN").split()[0].upper()
    try:
        existing: dict[str, Any] | None = read_result(job_dir / RESULT_FILE)
        corrupt = None
    except CorruptResultError as e:
        existing = None
        corrupt = None if not (job_dir / RESULT_FILE).exists() else str(e)

    outcomes = read_rank_outcomes(job_dir)
    failures: dict[int, tuple[str, str]] = {}  # rank -> (status, error)
    missing: list[int] = []
    for r in range(end.world_size):
        o = outcomes.get(r)
        if o is None:
            missing.append(r)
        elif o["status"] != "ok":
            failures[r] = (o["status"], _first_line(o.get("error")) or "no error text")

    status, error = _verdict(state, end, failures, missing)
    if status is None:  # every rank ok and SLURM agrees
        if existing is not None:
            return existing, False
        status = "failed"
        error = (
            corrupt
            or f"rank 0 finished without writing {RESULT_FILE} (SLURM job {end.slurm_job_id})"
        )

    if existing is not None and existing["status"] != "ok":
        # Rank 0's own verdict stands unless SLURM or another rank tells more.
        root_elsewhere = any(r != 0 and not _is_secondary(e) for r, (_, e) in failures.items())
        if existing["status"] == status or not (root_elsewhere or status in ("timeout", "oom")):
            return existing, False

    result = dict(existing) if existing is not None else make_result(status="failed", config=config)
    result["status"] = status
    result["error"] = error
    result.setdefault("env", {})
    result["slurm"] = {
        "job_id": end.slurm_job_id,
        "state": end.slurm_state,
        "rank_failures": {str(r): e for r, (_, e) in sorted(failures.items())},
        "ranks_without_outcome": missing,
    }
    write_result(job_dir, result)
    return result, True


def _verdict(
    state: str, end: JobEnd, failures: dict[int, tuple[str, str]], missing: list[int]
) -> tuple[str | None, str | None]:
    if state == "TIMEOUT":
        return "timeout", (
            f"job exceeded its wall-clock limit job_timeout_s={end.job_timeout_s:g} "
            f"(SLURM --time={end.time_limit_min} min, job {end.slurm_job_id})"
        )
    if failures:
        # The root cause: not an echo of another rank's death; the most specific status.
        severity = {"oom": 0, "failed": 1, "timeout": 2}

        def rank_key(r: int) -> tuple[bool, int, int]:
            return _is_secondary(failures[r][1]), severity[failures[r][0]], r

        root = min(failures, key=rank_key)
        status = failures[root][0]
        err = f"rank {root}: {failures[root][1]}"
        if status == "timeout" and missing:
            err = (
                f"collective timed out (collective_timeout_s={end.collective_timeout_s:g}) "
                f"waiting for ranks {missing}; {err}"
            )
        others = sorted(set(failures) - {root})
        if others:
            err += f" (also ended badly: ranks {others})"
        if missing and status != "timeout":
            err += f" (ended without an outcome: ranks {missing})"
        return status, err
    if state == "OUT_OF_MEMORY":
        return "oom", f"SLURM killed job {end.slurm_job_id} for exceeding its memory"
    if missing:
        texts = [end.task_errors.get(r) for r in missing]
        detail = next((_first_line(t) for t in texts if t), "")
        err = f"ranks {missing} ended without an outcome (SLURM state {state})"
        return "failed", err + (f": {detail}" if detail else "")
    return None, None  # every rank reported ok: that outweighs SLURM's view of the teardown
