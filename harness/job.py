"""One job = one grid point x one engine: validate, run its ranks, leave a result.json.

Whatever happens (invalid config, crash, hang, out of memory), the job directory ends
with a result.json that says so; a result that is already `ok` is never overwritten.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness.config import JobConfig
from harness.rank_outcome import read_rank_outcomes, root_cause
from harness.result import RESULT_FILE, finished_ok, make_result, read_result, write_result
from harness.validate import validation_errors


def in_distributed_env() -> bool:
    """True inside torchrun, a SLURM task set up by the launcher, or any RANK/WORLD_SIZE env."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def run_job(cfg: JobConfig, job_dir: Path) -> dict[str, Any]:
    """Run the job (or skip it if already ok) and return its result."""
    job_dir = Path(job_dir)
    if finished_ok(job_dir):
        print(f"[harness] {job_dir}: already ok, skipped")
        return read_result(job_dir / RESULT_FILE)
    errors = validation_errors(cfg)  # needs no torch import, so a typo is refused at once
    if cfg.dry_run:
        verdict = "invalid: " + "; ".join(errors) if errors else "ok"
        print(f"[harness] dry run: {describe(cfg)} -> {job_dir} [{verdict}]")
        return make_result(status="invalid" if errors else "ok", config=asdict(cfg))
    if in_distributed_env():
        return run_in_existing_env(cfg, job_dir)
    errors = errors or validation_errors(cfg, local_devices=_local_gpus(cfg))
    if errors:
        return _write_failure(cfg, job_dir, "invalid", "; ".join(errors))

    from harness.launch import launch_local

    _clear_previous_attempt(job_dir)
    exit_code, timed_out = launch_local(cfg, job_dir)
    return decide_result(cfg, job_dir, exit_code=exit_code, timed_out=timed_out)


def run_in_existing_env(cfg: JobConfig, job_dir: Path) -> dict[str, Any] | None:
    """Run this process as one rank of an environment someone else set up (SLURM, torchrun)."""
    from harness.worker import run_rank

    return run_rank(cfg, job_dir)


def decide_result(
    cfg: JobConfig, job_dir: Path, *, exit_code: int | None, timed_out: bool
) -> dict[str, Any]:
    """The job's result from what its ranks left behind."""
    cause = root_cause(read_rank_outcomes(job_dir))
    if cause is None and finished_ok(job_dir):
        return read_result(job_dir / RESULT_FILE)
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


def _write_failure(cfg: JobConfig, job_dir: Path, status: str, error: str) -> dict[str, Any]:
    result = make_result(status=status, config=asdict(cfg), error=error)
    if not finished_ok(job_dir):
        write_result(job_dir, result)
    print(f"[harness] {describe(cfg)}: {status}: {error}")
    return result


def _clear_previous_attempt(job_dir: Path) -> None:
    shutil.rmtree(job_dir / "ranks", ignore_errors=True)
    shutil.rmtree(job_dir / "traces", ignore_errors=True)


def _local_gpus(cfg: JobConfig) -> int | None:
    if cfg.device == "cpu":
        return None
    try:
        import torch
    except ImportError:
        return None
    if cfg.device == "cuda" or cfg.backend == "nccl" or torch.cuda.is_available():
        return torch.cuda.device_count()
    return None
