"""`python -m harness` / `yafsdp-bench`: one job, or a Hydra multirun of them.

python -m harness model=llama_tiny engine=fsdp2 gpus=2 seq_len=128 ckpt_layers=1
python -m harness -m experiment=cpu_demo

Ctrl-C or SIGTERM ends the running job's ranks, marks that job `interrupted`, writes the
sweep's results.csv for what finished and exits 130; the same command resumes.
"""

from __future__ import annotations

import shlex
import signal
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from harness import callbacks
from harness.config import JobConfig
from harness.dirlock import DirectoryLocked, acquire
from harness.job import Interrupted, JobOutcome, in_distributed_env, run_in_existing_env, run_job
from harness.result import Result
from harness.slurm import register_plugin
from harness.validate import unknown_field_errors

SWEEPS_DIR = Path(__file__).resolve().parent.parent / "sweeps"
EXIT_INVALID, EXIT_FAILED, EXIT_LOCKED, EXIT_INTERRUPTED = 2, 1, 3, 130

ConfigStore.instance().store(name="job_schema", node=JobConfig)
# A dry run leaves no `.hydra/` in the job directories it only names.
OmegaConf.register_new_resolver(
    "harness_unless_dry_run", lambda dry_run, value: None if dry_run else value, replace=True
)

register_plugin()  # hydra/launcher=slurm, also from a source checkout


@hydra.main(version_base="1.3", config_path=str(SWEEPS_DIR), config_name="config")
def run(cfg: DictConfig) -> Result | None:
    """The Hydra task: one job, in this process's sweep or on its own."""
    refusals = unknown_field_errors(OmegaConf.to_container(cfg, resolve=False))  # type: ignore[arg-type]
    job_cfg: JobConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    hydra_cfg = HydraConfig.get()
    job_dir = Path(hydra_cfg.runtime.output_dir)
    if in_distributed_env():  # one rank of a SLURM job: the submitter decides the result
        return run_in_existing_env(job_cfg, job_dir)
    single = hydra_cfg.mode == RunMode.RUN
    if single and not job_cfg.dry_run:
        try:
            acquire(job_dir, what="job directory")  # held until this process exits
        except DirectoryLocked as e:
            print(f"[harness] refused: {e}", file=sys.stderr)
            sys.exit(EXIT_LOCKED)
    label = _job_label(job_cfg, hydra_cfg.overrides.task)
    outcome = run_job(
        job_cfg, job_dir, refusals=refusals, say=lambda text: print(f"[harness] {label}: {text}")
    )
    print(f"[harness] {label}: {_outcome_text(outcome)}")
    sweep = callbacks.active_sweep()
    if sweep is not None:
        sweep.results.append(outcome.result)
    if job_cfg.dry_run:
        _remove_if_empty(job_dir)
    status = outcome.result.status
    # A single run reports failure through its exit code; a sweep goes on to the next job.
    if single and status != "ok":
        sys.exit(EXIT_INVALID if status == "invalid" else EXIT_FAILED)
    return outcome.result


def _job_label(cfg: JobConfig, overrides: Any) -> str:
    """The job's grid coordinates, plus any other field set on the command line."""
    shown = {"model", "engine", "gpus", "seq_len", "ckpt_layers", "dry_run", "hydra.sweep.dir"}
    extra = [o for o in overrides if o.split("=")[0].lstrip("+~") not in shown]
    point = f"model={cfg.model} engine={cfg.engine.label} gpus={cfg.gpus} seq_len={cfg.seq_len}"
    return " ".join([point, f"ckpt_layers={cfg.ckpt_layers}", *extra])


def _outcome_text(outcome: JobOutcome) -> str:
    result = outcome.result
    status = result.status
    if result.config.get("dry_run"):
        verdict = "ok" if status == "ok" else f"invalid: {result.error}"
        return f"dry run -> {outcome.job_dir} [{verdict}]"
    if status != "ok":
        return f"{status}: {result.error}"
    m = result.metrics
    where = outcome.job_dir / "result.json"
    if not outcome.ran:
        return f"skipped, an earlier ok result stands ({m.iteration_time_s:.4f} s/step) -> {where}"
    return (
        f"ok: iteration {m.iteration_time_s:.4f} s (p10 {m.iteration_time_p10_s:.4f}, "
        f"p90 {m.iteration_time_p90_s:.4f}), {m.tokens_per_s_per_device:.0f} "
        f"tokens/s/device, final loss {m.losses[-1]:.4f} -> {where}"
    )


def _remove_if_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


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
    path = sweep.finish()
    done = sum(r.status != "interrupted" for r in sweep.results)
    print(
        f"[harness] interrupted ({signal_name}) after {done} finished job(s); results in "
        f"{path}; resume with the same command: {command}",
        file=sys.stderr,
    )


def main() -> None:
    """Console entry point: the Hydra app, with interrupts turned into a clean exit 130."""
    signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        run()
    except (KeyboardInterrupt, Interrupted) as e:
        _after_interrupt(e.signal_name if isinstance(e, Interrupted) else "SIGINT")
        sys.exit(EXIT_INTERRUPTED)
