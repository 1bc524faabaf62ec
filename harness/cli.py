"""`python -m harness` / `yafsdp-bench`: one job, or a Hydra multirun of them.

python -m harness model=llama_tiny engine=fsdp2 gpus=2 seq_len=128 ckpt_layers=1
python -m harness -m experiment=cpu_demo

The console shows one line per finished job and a summary at the end (harness.sweep.console);
what the ranks print goes to `<job dir>/ranks/rank<r>.log`. Ctrl-C or SIGTERM ends the
running job's ranks, marks that job `interrupted`, writes the sweep's results.csv for what
finished and exits 130; the same command resumes. A sweep with a job that is not ok exits 1
(2 when every such job was refused as invalid), as a single failed job does, unless
`allow_failures=true` (drills).
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from harness.config import JobConfig
from harness.job.failure import disk_full, failure_result
from harness.job.run import (
    Interrupted,
    JobOutcome,
    in_distributed_env,
    run_in_existing_env,
    run_job,
)
from harness.jobdir.result import Result, make_result
from harness.slurm import register_plugin, register_sweeper
from harness.sweep import callbacks, job_dirname
from harness.sweep.callbacks import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_LOCKED
from harness.sweep.console import Console, job_label, short_path, swept_extras
from harness.sweep.dirlock import DirectoryLocked, DirLock, LockUnavailable, acquire
from harness.sweep.empty_dirs import remove_dry_run_dir, remove_empty_up_to
from harness.validate import unknown_field_errors

SWEEPS_DIR = Path(__file__).resolve().parent.parent / "sweeps"

ConfigStore.instance().store(name="job_schema", node=JobConfig)


def _hydra_subdir(dry_run: bool, output_dir: str, subdir: str) -> str | None:
    """Where Hydra saves a job's config (`.hydra/`), or None for not at all: a dry run leaves
    nothing in the job directories it only names, and a job directory that cannot be
    written (read-only, a full disk) gets the harness's own refusal or row instead of
    Hydra's traceback, which would end the sweep."""
    if dry_run:
        return None
    if os.path.isdir(output_dir) and (not os.access(output_dir, os.W_OK) or disk_full(output_dir)):
        return None
    return subdir


OmegaConf.register_new_resolver("harness_hydra_subdir", _hydra_subdir, replace=True)

register_plugin()  # hydra/launcher=slurm, also from a source checkout
register_sweeper()  # hydra/sweeper=alternating, the default
job_dirname.register()  # ${harness_job_subdir:...}: readable job directory names


@hydra.main(version_base="1.3", config_path=str(SWEEPS_DIR), config_name="config")
def run(cfg: DictConfig) -> Result | None:
    """The Hydra task: one job, in this process's sweep or on its own."""
    hydra_cfg = HydraConfig.get()
    job_dir = Path(hydra_cfg.runtime.output_dir)
    if in_distributed_env():  # one rank of a SLURM job: the submitter decides the result
        return _run_as_rank(OmegaConf.to_object(cfg), job_dir)  # type: ignore[arg-type]
    single = hydra_cfg.mode == RunMode.RUN
    dry_run = bool(cfg.get("dry_run", False))
    repeats = cfg.get("repeats", 1)
    if single and isinstance(repeats, int) and repeats > 1 and not cfg.get("quiet", False):
        print(
            f"[harness] note: repeats={repeats} runs each job {repeats} times in a multirun "
            f"(-m); this single run is run {cfg.get('repeat', 0)} of them",
            file=sys.stderr,
        )
    sweep = callbacks.active_sweep()
    config: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    console, label = _console_and_label(cfg, config, sweep)
    lock, busy = (None, None) if dry_run else _lock_job_dir(job_dir, single=single)
    console.job_started(job_dir)
    try:
        if busy is not None:  # not written: the directory is another runner's
            result = make_result(status="failed", config=config, error=f"not run: {busy}")
            outcome = JobOutcome(result, False, job_dir)
        else:
            outcome = _run_one(cfg, job_dir, console, label)
    except Exception as e:  # a bug, a full disk, a library's error: this job's row
        outcome = JobOutcome(failure_result(config, job_dir, e), True, job_dir)
    finally:
        if lock is not None:
            lock.release()
    console.job_finished(label, outcome.result, job_dir, ran=outcome.ran)
    if sweep is not None:
        sweep.results.append(outcome.result)
    elif not dry_run and not cfg.quiet:
        console.line(f"result: {short_path(job_dir / 'result.json')}")
    if dry_run:
        if sweep is None:
            remove_dry_run_dir(job_dir)
        else:  # the sweep's own directory goes at its end, if the sweep made it
            remove_empty_up_to(job_dir, sweep.sweep_dir)
    status = outcome.result.status
    # A single run reports failure through its exit code; a sweep goes on to the next job.
    if single and status != "ok":
        sys.exit(EXIT_INVALID if status == "invalid" else EXIT_FAILED)
    return outcome.result


def _console_and_label(
    cfg: DictConfig, config: dict[str, Any], sweep: callbacks.ActiveSweep | None
) -> tuple[Console, str]:
    """The sweep's console and the job's line label, or a single run's own console."""
    if sweep is not None:
        extras = swept_extras(HydraConfig.get().overrides.task, sweep.swept)
        return sweep.console, job_label(config, extras)
    console = Console(total=None, quiet=bool(cfg.quiet), verbose=bool(cfg.verbose))
    return console, job_label(config)


def _lock_job_dir(job_dir: Path, *, single: bool) -> tuple[DirLock | None, str | None]:
    """(lock, None), or (None, why) for a sweep's job whose directory is another runner's:
    one writer per job directory, a single run's or a sweep's. A single run that cannot
    have it is refused."""
    try:
        return acquire(job_dir, what="job directory"), None
    except (DirectoryLocked, LockUnavailable) as e:
        if single:
            print(f"[harness] refused: {e}", file=sys.stderr)
            sys.exit(EXIT_LOCKED)
        return None, str(e)


def _run_one(cfg: DictConfig, job_dir: Path, console: Console, label: str) -> JobOutcome:
    refusals = unknown_field_errors(OmegaConf.to_container(cfg, resolve=False))  # type: ignore[arg-type]
    job_cfg: JobConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    return run_job(
        job_cfg,
        job_dir,
        refusals=refusals,
        on_poll=lambda: console.poll(label),
        say=console.say,
        ranks_here=not _launched_on_slurm(),
    )


def _launched_on_slurm() -> bool:
    """Whether this sweep's launcher is the SLURM one (its jobs' ranks run on the cluster)."""
    launcher = HydraConfig.get().launcher
    target = launcher.get("_target_", "") if launcher is not None else ""
    return "slurm" in str(target).lower()


def _run_as_rank(job_cfg: JobConfig, job_dir: Path) -> Result | None:
    """One rank under torchrun or srun; rank 0 (which returns the result) prints the job's
    line, as a job the harness launched itself does."""
    console = Console(total=None, quiet=job_cfg.quiet, verbose=job_cfg.verbose)
    console.job_started(job_dir)
    result = run_in_existing_env(job_cfg, job_dir)
    if result is not None:
        console.job_finished(job_label(asdict(job_cfg)), result, job_dir, ran=True)
        if not job_cfg.quiet:
            print(f"result: {short_path(job_dir / 'result.json')}", flush=True)
    return result


def _raise_interrupted(signum: int, _frame: Any) -> None:
    raise Interrupted(signal.Signals(signum).name)


def handle_stop_signals() -> None:
    """SIGTERM, and SIGHUP (a closed terminal), end the sweep as Ctrl-C does; a signal this
    process was started ignoring stays ignored, as Python leaves SIGINT: under `nohup` the
    sweep outlives its terminal, and a `&` job in a script is not ended by Ctrl-C."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) != signal.SIG_IGN:
            signal.signal(sig, _raise_interrupted)


def _after_interrupt(signal_name: str) -> None:
    """Say what was kept and how to go on; results.csv covers the jobs that finished."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # a second one must not cut
        signal.signal(sig, signal.SIG_IGN)  # this short
    command = shlex.join([Path(sys.executable).name, "-m", "harness", *sys.argv[1:]])
    sweep = callbacks.active_sweep()
    if sweep is None or sweep.dry_run:
        _tell(f"[harness] interrupted ({signal_name}); rerun with: {command}")
        return
    sweep.finish(interrupted=signal_name)
    _tell(f"[harness] interrupted ({signal_name}); resume with the same command: {command}")
    if sweep.rerun_since is not None:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(sweep.rerun_since))
        _tell(f"[harness] its rerun=true resumes this rerun: results measured since {since} stand")


def _tell(line: str) -> None:
    """A line on stderr, which a closed terminal (SIGHUP) may no longer take."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def main() -> None:
    """Console entry point: the Hydra app, with interrupts turned into a clean exit 130.
    Mistyped fields are refused before Hydra reads the command line (harness.cli_overrides)."""
    from harness.cli_overrides import override_errors, with_launcher_alias

    args, notes = with_launcher_alias(sys.argv[1:])
    for note in notes:
        print(note, file=sys.stderr)
    errors = override_errors(args)
    if errors:
        print(f"[harness] refused: {'; '.join(errors)}", file=sys.stderr)
        sys.exit(EXIT_INVALID)
    sys.argv[1:] = args
    handle_stop_signals()
    try:
        run()
    except (KeyboardInterrupt, Interrupted) as e:
        _after_interrupt(e.signal_name if isinstance(e, Interrupted) else "SIGINT")
        sys.exit(EXIT_INTERRUPTED)
    except BaseException:  # Hydra itself failed (it has said why): the sweep's end still runs
        sweep = callbacks.active_sweep()
        if sweep is not None and not sweep.finished:
            sweep.finish()
        raise
    # A multirun with a job that is not ok fails, as pytest does (allow_failures: exit 0).
    sys.exit(callbacks.exit_code())
