"""`python -m harness` / `yafsdp-bench`: one job, or a Hydra multirun of them.

python -m harness model=llama_tiny engine=fsdp2 gpus=2 seq_len=128 ckpt_layers=1
python -m harness -m experiment=cpu_demo

The console shows one line per finished job and a summary at the end (harness.sweep.console);
what the ranks print goes to `<job dir>/ranks/rank<r>.log`. Ctrl-C or SIGTERM ends the
running job's ranks, marks that job `interrupted`, writes the sweep's results.csv for what
finished and exits 130; the same command resumes.
"""

from __future__ import annotations

import shlex
import signal
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from harness.config import JobConfig
from harness.job.run import Interrupted, in_distributed_env, run_in_existing_env, run_job
from harness.jobdir.result import Result
from harness.slurm import register_plugin
from harness.sweep import callbacks, job_dirname
from harness.sweep.console import Console, job_label, short_path, swept_extras
from harness.sweep.dirlock import DirectoryLocked, acquire
from harness.sweep.empty_dirs import remove_dry_run_dir, remove_empty_up_to
from harness.validate import unknown_field_errors

SWEEPS_DIR = Path(__file__).resolve().parent.parent / "sweeps"
EXIT_INVALID, EXIT_FAILED, EXIT_LOCKED, EXIT_INTERRUPTED = 2, 1, 3, 130

ConfigStore.instance().store(name="job_schema", node=JobConfig)
# A dry run leaves no `.hydra/` in the job directories it only names.
OmegaConf.register_new_resolver(
    "harness_unless_dry_run", lambda dry_run, value: None if dry_run else value, replace=True
)

register_plugin()  # hydra/launcher=slurm, also from a source checkout
job_dirname.register()  # ${harness_job_subdir:...}: readable job directory names


@hydra.main(version_base="1.3", config_path=str(SWEEPS_DIR), config_name="config")
def run(cfg: DictConfig) -> Result | None:
    """The Hydra task: one job, in this process's sweep or on its own."""
    refusals = unknown_field_errors(OmegaConf.to_container(cfg, resolve=False))  # type: ignore[arg-type]
    job_cfg: JobConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    hydra_cfg = HydraConfig.get()
    job_dir = Path(hydra_cfg.runtime.output_dir)
    if in_distributed_env():  # one rank of a SLURM job: the submitter decides the result
        return _run_as_rank(job_cfg, job_dir)
    single = hydra_cfg.mode == RunMode.RUN
    if single and not job_cfg.dry_run:
        try:
            acquire(job_dir, what="job directory")  # held until this process exits
        except DirectoryLocked as e:
            print(f"[harness] refused: {e}", file=sys.stderr)
            sys.exit(EXIT_LOCKED)
    sweep = callbacks.active_sweep()
    if sweep is not None:
        console = sweep.console
        label = job_label(asdict(job_cfg), swept_extras(hydra_cfg.overrides.task, sweep.swept))
    else:
        console = Console(total=None, quiet=job_cfg.quiet, verbose=job_cfg.verbose)
        label = job_label(asdict(job_cfg))
    console.job_started(job_dir)
    outcome = run_job(
        job_cfg,
        job_dir,
        refusals=refusals,
        on_poll=lambda: console.poll(label),
        say=console.say,
    )
    console.job_finished(label, outcome.result, job_dir, ran=outcome.ran)
    if sweep is not None:
        sweep.results.append(outcome.result)
    elif not job_cfg.dry_run and not job_cfg.quiet:
        print(f"result: {short_path(job_dir / 'result.json')}")
    if job_cfg.dry_run:
        if sweep is None:
            remove_dry_run_dir(job_dir)
        else:  # the sweep's own directory goes at its end, if the sweep made it
            remove_empty_up_to(job_dir, sweep.sweep_dir)
    status = outcome.result.status
    # A single run reports failure through its exit code; a sweep goes on to the next job.
    if single and status != "ok":
        sys.exit(EXIT_INVALID if status == "invalid" else EXIT_FAILED)
    return outcome.result


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


def _after_interrupt(signal_name: str) -> None:
    """Say what was kept and how to go on; results.csv covers the jobs that finished."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut this short
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    command = shlex.join([Path(sys.executable).name, "-m", "harness", *sys.argv[1:]])
    sweep = callbacks.active_sweep()
    if sweep is None or sweep.dry_run:
        print(f"[harness] interrupted ({signal_name}); rerun with: {command}", file=sys.stderr)
        return
    sweep.finish(interrupted=signal_name)
    print(
        f"[harness] interrupted ({signal_name}); resume with the same command: {command}",
        file=sys.stderr,
    )


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
    signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        run()
    except (KeyboardInterrupt, Interrupted) as e:
        _after_interrupt(e.signal_name if isinstance(e, Interrupted) else "SIGINT")
        sys.exit(EXIT_INTERRUPTED)
