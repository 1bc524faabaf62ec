"""Hydra callbacks: one runner per sweep directory, its console, and its results at the end."""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from harness.job.rerun_since import begin_rerun, end_rerun
from harness.jobdir.result import Result
from harness.jobdir.rounds import new_round
from harness.sweep.console import Console
from harness.sweep.dirlock import (
    DirectoryLocked,
    DirLock,
    LockUnavailable,
    acquire,
    describe_holder,
)
from harness.sweep.empty_dirs import first_existing
from harness.sweep.order import alternate, checked_repeats
from harness.sweep.running import nested_in_use

# Exit statuses of `python -m harness`, a single run's and a sweep's alike.
EXIT_FAILED, EXIT_INVALID, EXIT_LOCKED, EXIT_INTERRUPTED = 1, 2, 3, 130


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
    allow_failures: bool = False  # a drill: jobs that are not ok do not fail the sweep
    exit_code: int = 0  # set by finish: EXIT_FAILED when a job is not ok (and not allowed)
    not_ok: int = 0  # set by finish: jobs whose status is not ok
    finished: bool = False  # finish has run (once is enough)
    kept_ancestor: Path | None = None  # the sweep directory's nearest ancestor at the start
    rerun_since: float | None = None  # rerun=true: when this rerun began (harness.job.rerun_since)

    def finish(self, *, interrupted: str | None = None) -> Path | None:
        """Write results.csv and the timelines (not for a dry run), print the summary and
        release the lock. Never raises for a table it cannot write (a full disk): the
        summary says so and the exit status fails."""
        self.finished = True
        try:
            if self.dry_run:
                self._remove_dry_run_traces()
                self._judge(self._seen())
                self.console.summary(
                    sweep_dir=self.sweep_dir, results_csv=None, verdict=self._verdict()
                )
                return None
            path, pictures, statuses, problem = self._write_tables()
            self._judge(self._seen() or [(status, False) for status in statuses])
            if problem is not None:  # the sweep's own record is incomplete
                self.exit_code = EXIT_FAILED
            verdict = None if interrupted else self._verdict()
            lines = [line for line in (problem, verdict) if line]
            self.console.summary(
                sweep_dir=self.sweep_dir,
                results_csv=path,
                timelines=pictures,
                statuses=statuses,  # jobs that ran elsewhere (SLURM) are only on disk
                interrupted=interrupted,
                verdict="\n".join(lines) or None,
            )
            return path
        finally:
            if self.lock is not None:
                self.lock.release()

    def _write_tables(self) -> tuple[Path | None, int, list[str], str | None]:
        """(results.csv, timelines drawn, job statuses on disk, what could not be written)."""
        from harness.job.failure import describe_error
        from harness.results.table import collect_results, write_results_csv
        from harness.results.timelines import draw_sweep_timelines

        try:
            df = collect_results(self.sweep_dir)
            statuses = list(df["status"]) if "status" in df else []
            path = write_results_csv(self.sweep_dir, df)
        except Exception as e:
            _, why = describe_error(e, self.sweep_dir)
            return None, 0, [], f"results.csv not written: {why}"
        try:
            pictures = len(draw_sweep_timelines(self.sweep_dir, df))
        except Exception as e:
            _, why = describe_error(e, self.sweep_dir)
            return path, 0, statuses, f"timelines not drawn: {why}"
        return path, pictures, statuses, None

    def _seen(self) -> list[tuple[str, bool]]:
        """(status, allow_failures of its config) of each job this process saw end."""
        return [
            (r.status, bool(r.config.get("allow_failures"))) for _, r, _ in self.console.finished
        ]

    def _judge(self, jobs: list[tuple[str, bool]]) -> None:
        """The sweep's exit status, as pytest's: non-zero when a job is not ok, unless the
        sweep or that job's own config (a drill) says allow_failures=true."""
        self.not_ok = sum(status != "ok" for status, _ in jobs)
        failing = [s for s, allowed in jobs if s != "ok" and not (allowed or self.allow_failures)]
        if not failing:
            self.exit_code = 0
        else:
            self.exit_code = EXIT_INVALID if set(failing) == {"invalid"} else EXIT_FAILED

    def _verdict(self) -> str | None:
        """The summary's line on the exit status, when jobs were not ok."""
        n = self.not_ok
        if not n:
            return None
        jobs = "1 job is" if n == 1 else f"{n} jobs are"
        if self.exit_code == 0:
            return f"exit status 0: {jobs} not ok, allowed by allow_failures=true"
        return (
            f"exit status {self.exit_code}: {jobs} not ok (allow_failures=true lets a drill exit 0)"
        )

    def _remove_dry_run_traces(self) -> None:
        """Hydra makes the sweep directory and its multirun.yaml even for a dry run."""
        if not self.existed:
            from harness.sweep.empty_dirs import remove_empty_up_to

            (self.sweep_dir / "multirun.yaml").unlink(missing_ok=True)
            remove_empty_up_to(self.sweep_dir, self.kept_ancestor or self.sweep_dir.parent)


_active: ActiveSweep | None = None
_exit_code = 0  # of the last sweep this process finished


def active_sweep() -> ActiveSweep | None:
    return _active


def exit_code() -> int:
    """The exit status the last finished sweep asks for (0 when none ran)."""
    return _exit_code


def sweep_plan(config: DictConfig) -> tuple[int | None, frozenset[str]]:
    """(number of jobs, fields swept over more than one value), as the sweeper expands
    `hydra.sweeper.params`, the command line and `repeats`; (None, empty) if it cannot tell."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        params = config.hydra.sweeper.get("params") or {}
        arguments = [f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task)
        overrides = OverridesParser.create().parse_overrides(arguments)
        jobs = BasicSweeper.split_arguments(overrides, None)[0]
        repeats = checked_repeats(
            [(o.get_key_element(), o.is_sweep_override()) for o in overrides],
            config.get("repeats", 1),
        )
        jobs = alternate(jobs, repeats)
    except Exception:  # another sweeper, a sweep syntax the basic one lacks, or refused
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
        new_round()  # every job this invocation runs (or submits) is of one round
        sweep_dir = Path(config.hydra.sweep.dir)
        dry_run = bool(config.get("dry_run", False))
        existed = sweep_dir.exists()
        kept = first_existing(sweep_dir)
        lock = None
        if not dry_run:  # a dry run writes nothing, so it needs no lock
            try:
                lock = acquire(sweep_dir, what="sweep directory")
            except (DirectoryLocked, LockUnavailable) as e:  # a SystemExit passes Hydra's
                print(f"[harness] refused: {e}", file=sys.stderr)  # catch of callback errors
                sys.exit(EXIT_LOCKED)
            nested = nested_in_use(sweep_dir)
            if nested is not None:
                lock.release()
                print(f"[harness] refused: {nested}", file=sys.stderr)
                sys.exit(EXIT_LOCKED)
            if lock.taken_over:
                print(
                    f"[harness] warning: taking over {sweep_dir} from "
                    f"{describe_holder(lock.taken_over)}, which ended without releasing it",
                    file=sys.stderr,
                )
        rerun_since = begin_rerun(sweep_dir) if lock is not None and config.get("rerun") else None
        verbose = bool(config.get("verbose", False))
        if not verbose:  # Hydra's "Launching N jobs" and "#i : overrides" lines
            logging.getLogger("hydra").setLevel(logging.WARNING)
        total, swept = sweep_plan(config)
        console = Console(total=total, quiet=bool(config.get("quiet", False)), verbose=verbose)
        _active = ActiveSweep(sweep_dir, dry_run, existed, lock, console, swept, kept_ancestor=kept)
        _active.allow_failures = bool(config.get("allow_failures", False))
        _active.rerun_since = rerun_since

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        global _active, _exit_code
        if _active is not None:
            if _active.rerun_since is not None:  # every job ran: this rerun is complete
                end_rerun(_active.sweep_dir)
            _active.finish()
            _exit_code = _active.exit_code
        _active = None
