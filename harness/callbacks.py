"""Hydra callbacks: one runner per sweep directory, and the sweep's results when it ends."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from harness.dirlock import DirectoryLocked, DirLock, acquire, describe_holder
from harness.result import Result


@dataclass
class ActiveSweep:
    """The multirun this process is running (Hydra runs its local jobs in this process)."""

    sweep_dir: Path
    dry_run: bool
    existed: bool  # the sweep directory was there before this run
    lock: DirLock | None
    results: list[Result] = field(default_factory=list)  # one per job, in order

    def finish(self) -> Path | None:
        """Write results.csv and the timelines (not for a dry run); release the lock."""
        try:
            if self.dry_run:
                self._remove_dry_run_traces()
                return None
            from harness.results import collect_results, write_results_csv
            from harness.trace.timeline import draw_sweep_timelines

            df = collect_results(self.sweep_dir)
            path = write_results_csv(self.sweep_dir, df)
            print(f"[harness] sweep results: {path}")
            pictures = draw_sweep_timelines(self.sweep_dir, df)
            if pictures:
                print(f"[harness] timelines: {len(pictures)} in {self.sweep_dir / 'timelines'}")
            return path
        finally:
            if self.lock is not None:
                self.lock.release()

    def _remove_dry_run_traces(self) -> None:
        """Hydra makes the sweep directory and its multirun.yaml even for a dry run."""
        if not self.existed:
            (self.sweep_dir / "multirun.yaml").unlink(missing_ok=True)
            try:
                self.sweep_dir.rmdir()
            except OSError:
                pass


_active: ActiveSweep | None = None


def active_sweep() -> ActiveSweep | None:
    return _active


class AggregateResults(Callback):
    """Lock the sweep directory at the start; write `results.csv` and timelines at the end."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        global _active
        sweep_dir = Path(config.hydra.sweep.dir)
        dry_run = bool(config.get("dry_run", False))
        existed = sweep_dir.exists()
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
        _active = ActiveSweep(sweep_dir, dry_run, existed, lock)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        global _active
        if _active is not None:
            _active.finish()
        _active = None
