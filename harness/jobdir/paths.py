"""The files and folders of one job directory, named in one place.

    <job dir>/result.json            the job's result (harness.jobdir.result)
    <job dir>/prediction.json        the planner's prediction, written once when the job
                                     starts (harness.jobdir.prediction)
    <job dir>/result.previous.<n>.json  earlier attempts' results, set aside on re-runs
                                     (1 the oldest; result.previous.json in older dirs)
    <job dir>/job_config.json        the config the ranks read (local launcher)
    <job dir>/runner.log             the runner's traceback when running the job raised
    <job dir>/attempt.json           the running attempt's process group (harness.job.strays)
    <job dir>/ranks/rank<r>.log      what rank r printed
    <job dir>/ranks/rank<r>.json     how rank r ended (harness.jobdir.rank_outcome)
    <job dir>/ranks/exits.json       exit codes of ranks that died first (local launcher)
    <job dir>/ranks/launcher.log     the elastic agent's output
    <job dir>/ranks/phase            rank 0's current phase, for the live console line
    <job dir>/traces/rank<r>.json.gz rank r's profiler trace
    <job dir>/trace_cache/           what the traces say, cached: each trace's summary and
                                     the job's attribution (harness.trace.cache)

Torch-free: the report and the trace analysis use it too.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

RESULT_FILE = "result.json"
PREVIOUS_RESULT_FILE = "result.previous.json"  # the one slot of older versions
PREVIOUS_RESULT_GLOB = "result.previous.*.json"
JOB_CONFIG_FILE = "job_config.json"
RANKS_DIR = "ranks"
TRACES_DIR = "traces"
EXITS_FILE = "exits.json"
LAUNCHER_LOG = "launcher.log"
RUNNER_LOG = "runner.log"
PHASE_FILE = "phase"


@dataclass(frozen=True)
class JobDir:
    root: Path

    def __init__(self, root: Path | str) -> None:
        object.__setattr__(self, "root", Path(root))

    @property
    def result(self) -> Path:
        return self.root / RESULT_FILE

    @property
    def previous_result(self) -> Path:
        return self.root / PREVIOUS_RESULT_FILE

    def previous_results(self) -> list[Path]:
        """Every set-aside result, oldest first (the one-slot file of older versions first)."""
        numbered = []
        for path in self.root.glob(PREVIOUS_RESULT_GLOB):
            number = path.name.removeprefix("result.previous.").removesuffix(".json")
            if number.isdigit():
                numbered.append((int(number), path))
        older = [self.previous_result] if self.previous_result.exists() else []
        return older + [path for _, path in sorted(numbered)]

    @property
    def job_config(self) -> Path:
        return self.root / JOB_CONFIG_FILE

    @property
    def runner_log(self) -> Path:
        return self.root / RUNNER_LOG

    @property
    def ranks(self) -> Path:
        return self.root / RANKS_DIR

    @property
    def traces(self) -> Path:
        return self.root / TRACES_DIR

    @property
    def exits(self) -> Path:
        return self.ranks / EXITS_FILE

    @property
    def launcher_log(self) -> Path:
        return self.ranks / LAUNCHER_LOG

    @property
    def phase(self) -> Path:
        return self.ranks / PHASE_FILE

    def rank_log(self, rank: int) -> Path:
        return self.ranks / f"rank{rank}.log"

    def rank_outcome(self, rank: int) -> Path:
        return self.ranks / f"rank{rank}.json"

    def trace(self, rank: int) -> Path:
        return self.traces / f"rank{rank}.json.gz"

    def set_aside_result(self) -> Path | None:
        """An earlier attempt's result must not pass for this attempt's: it is kept as
        result.previous.<n>.json (n one past the last), never deleted or overwritten, so a
        rerun that fails cannot cost an earlier ok measurement. Returns where it went."""
        if not self.result.exists():
            return None
        n = len(self.previous_results()) + 1
        while True:
            target = self.root / f"result.previous.{n}.json"
            try:
                os.link(self.result, target)  # fails rather than replace an existing file
            except FileExistsError:
                n += 1
                continue
            except OSError:  # a file system without hard links; the directory is locked
                if target.exists():
                    n += 1
                    continue
                os.replace(self.result, target)
                return target
            self.result.unlink()
            return target

    def clear_previous_attempt(self) -> None:
        """Before a (re)run: what an earlier attempt's ranks left (outcomes, logs, traces)
        must not pass for this attempt's."""
        shutil.rmtree(self.ranks, ignore_errors=True)
        shutil.rmtree(self.traces, ignore_errors=True)
