"""Hydra callbacks: one runner per sweep directory, its console, and its results at the end."""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from harness.jobdir.result import Result
from harness.sweep.console import Console
from harness.sweep.dirlock import DirectoryLocked, DirLock, acquire, describe_holder
from harness.sweep.empty_dirs import first_existing


@dataclass
class ActiveSweep:
    """The multirun this process is running (Hydra runs its local jobs in this process)."""

    sweep_dir: Path
    dry_run: bool
    existed: bool  # the sweep directory was there before this run
    lock: DirLock | None
    console: Console
    swept: frozenset[str] = frozenset()  # fields with more than one value in this sweep
    results: list[Result] = field(default_factory=list)  # one per job, in order
    kept_ancestor: Path | None = None  # the sweep directory's nearest ancestor at the start

    def finish(self, *, interrupted: str | None = None) -> Path | None:
        """Write results.csv and the timelines (not for a dry run), print the summary and
        release the lock."""
        try:
            if self.dry_run:
                self._remove_dry_run_traces()
                self.console.summary(sweep_dir=self.sweep_dir, results_csv=None)
                return None
            from harness.results.table import collect_results, write_results_csv
            from harness.results.timelines import draw_sweep_timelines

            df = collect_results(self.sweep_dir)
            path = write_results_csv(self.sweep_dir, df)
            pictures = draw_sweep_timelines(self.sweep_dir, df)
            statuses = list(df["status"]) if "status" in df else []
            self.console.summary(
                sweep_dir=self.sweep_dir,
                results_csv=path,
                timelines=len(pictures),
                statuses=statuses,  # jobs that ran elsewhere (SLURM) are only on disk
                interrupted=interrupted,
            )
            return path
        finally:
            if self.lock is not None:
                self.lock.release()

    def _remove_dry_run_traces(self) -> None:
        """Hydra makes the sweep directory and its multirun.yaml even for a dry run."""
        if not self.existed:
            from harness.sweep.empty_dirs import remove_empty_up_to

            (self.sweep_dir / "multirun.yaml").unlink(missing_ok=True)
            remove_empty_up_to(self.sweep_dir, self.kept_ancestor or self.sweep_dir.parent)


_active: ActiveSweep | None = None


def active_sweep() -> ActiveSweep | None:
    return _active


def sweep_plan(config: DictConfig) -> tuple[int | None, frozenset[str]]:
    """(number of jobs, fields swept over more than one value), as Hydra's basic sweeper
    expands `hydra.sweeper.params` and the command line; (None, empty) if it cannot tell."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        params = config.hydra.sweeper.get("params") or {}
        arguments = [f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task)
        overrides = OverridesParser.create().parse_overrides(arguments)
        jobs = BasicSweeper.split_arguments(overrides, None)[0]
    except Exception:  # another sweeper, or a sweep syntax the basic one lacks
        return None, frozenset()
    values: dict[str, set[str]] = {}
    for job in jobs:
        for override in job:
            key, _, value = override.partition("=")
            values.setdefault(key.lstrip("+~"), set()).add(value)
    return len(jobs), frozenset(k for k, v in values.items() if len(v) > 1)


class AggregateResults(Callback):
    """Lock the sweep directory at the start; write `results.csv` and timelines at the end."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        global _active
        sweep_dir = Path(config.hydra.sweep.dir)
        dry_run = bool(config.get("dry_run", False))
        existed = sweep_dir.exists()
        kept = first_existing(sweep_dir)
        lock = None
        if not dry_run:  # a dry run writes nothing, so it needs no lock
            try:
                lock = acquire(sweep_dir, what="sweep directory")
            except DirectoryLocked as e:
                print(f"[harness] refused: {e}", file=sys.stderr)
                sys.exit(3)
            if lock.taken_over:
                print(
                    f"[harness] warning: taking over {sweep_dir} from "
                    f"{describe_holder(lock.taken_over)}, which ended without releasing it",
                    file=sys.stderr,
                )
        verbose = bool(config.get("verbose", False))
        if not verbose:  # Hydra's "Launching N jobs" and "#i : overrides" lines
            logging.getLogger("hydra").setLevel(logging.WARNING)
        total, swept = sweep_plan(config)
        console = Console(total=total, quiet=bool(config.get("quiet", False)), verbose=verbose)
        _active = ActiveSweep(sweep_dir, dry_run, existed, lock, console, swept, kept_ancestor=kept)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        global _active
        if _active is not None:
            _active.finish()
        _active = None
