"""Each rank's own outcome on disk, and the job status decided from all of them.

Only one rank's return value reaches a launcher (and a crashed rank returns nothing), so
every rank records how it ended in `<job_dir>/ranks/rank<r>.json`, and the job's status
is decided from those files.
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.jobdir.paths import JobDir
from harness.jobdir.result import write_json_atomic

# Errors that a rank sees because *another* rank died first: never the root cause.
_SECONDARY_MARKERS = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "NCCL communicator was aborted",
)


# How an allocator says it ran out (lower case): CUDA's "out of memory", and the CPU
# allocator's "DefaultCPUAllocator: can't allocate memory ... (Cannot allocate memory)".
_OOM_MARKERS = ("out of memory", "can't allocate memory", "not enough memory")


def classify(error: BaseException) -> str:
    """Map an exception to a result status: oom, timeout or failed.

    torch's OutOfMemoryError is recognised by its class name, so that this module (read by
    launchers and the report) never imports torch."""
    if any(c.__name__ in ("MemoryError", "OutOfMemoryError") for c in type(error).__mro__):
        return "oom"
    text = str(error).lower()
    if any(marker in text for marker in _OOM_MARKERS):
        return "oom"
    if "timed out" in text or "timeout" in type(error).__name__.lower():
        return "timeout"
    return "failed"


@dataclass(frozen=True)
class RankOutcome:
    """How one rank ended: its `ranks/rank<r>.json`, or, for a rank that died without
    writing one, what the launcher saw of its exit (`unrecorded`)."""

    rank: int
    status: str  # "ok", or the failure's status: oom, timeout or failed
    error: str | None = None
    time: float = 0.0  # when it ended (epoch seconds): ties between failures go to the first
    traceback: str = ""
    unrecorded: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def secondary(self) -> bool:
        """Whether the error is one a rank sees because another rank died first."""
        return any(m in (self.error or "") for m in _SECONDARY_MARKERS)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "rank": self.rank,
            "time": self.time,
            "status": self.status,
            "error": self.error,
        }
        return data | ({"traceback": self.traceback} if self.traceback else {})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankOutcome:
        return cls(
            rank=int(data["rank"]),
            status=str(data["status"]),
            error=data.get("error"),
            time=float(data.get("time") or 0.0),
            traceback=str(data.get("traceback") or ""),
        )


def write_rank_outcome(
    job_dir: Path, rank: int, *, error: BaseException | None, trace: str = ""
) -> None:
    outcome = RankOutcome(rank=rank, status="ok", time=time.time())
    if error is not None:
        message = _short(f"{type(error).__name__}: {error}")
        outcome = RankOutcome(
            rank=rank, status=classify(error), error=message, time=outcome.time, traceback=trace
        )
    write_json_atomic(JobDir(job_dir).rank_outcome(rank), outcome.to_dict())


def read_rank_outcome(path: Path) -> RankOutcome | None:
    """The outcome in `path`, or None for a file that is missing or half-written."""
    try:
        return RankOutcome.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _short(text: str, limit: int = 1000) -> str:
    return text if len(text) <= limit else text[:limit] + " ... (full traceback in ranks/)"


def read_rank_exits(job_dir: Path) -> dict[int, dict[str, Any]]:
    try:
        raw = json.loads(JobDir(job_dir).exits.read_text())
        return {int(rank): info for rank, info in raw.items()}
    except (OSError, ValueError, AttributeError):
        return {}


def _how_it_ended(exitcode: int) -> str:
    if exitcode < 0:
        try:
            return f"was killed ({signal.Signals(-exitcode).name})"
        except ValueError:
            return f"was killed (signal {-exitcode})"
    return f"exited with code {exitcode} without recording an outcome"


def unrecorded_failures(
    outcomes: list[RankOutcome], exits: dict[int, dict[str, Any]]
) -> list[RankOutcome]:
    """Outcomes for ranks that died without writing one (SIGKILL, segfault, os._exit)."""
    recorded = {o.rank for o in outcomes}
    return [
        RankOutcome(
            rank=rank,
            status="failed",
            error=_how_it_ended(int(info.get("exitcode", 1))),
            time=float(info.get("time", 0.0)),
            unrecorded=True,
        )
        for rank, info in sorted(exits.items())
        if rank not in recorded and info.get("exitcode")
    ]


def read_rank_outcomes(job_dir: Path) -> list[RankOutcome]:
    paths = sorted(JobDir(job_dir).ranks.glob("rank*.json"))
    return [o for o in map(read_rank_outcome, paths) if o is not None]


def root_cause(
    outcomes: list[RankOutcome], *, world_size: int | None = None
) -> tuple[str, str] | None:
    """(status, 'rank r: error') of the failure that started it all, or None if none failed.

    Outcomes from `unrecorded_failures` count like recorded ones. When every recorded
    failure is a side effect of another rank's death and `world_size` says which ranks
    left nothing, those ranks are named instead.
    """
    failed = [o for o in outcomes if not o.ok]
    if not failed:
        return None
    silent = sorted(set(range(world_size or 0)) - {o.rank for o in outcomes})
    if silent and all(o.secondary for o in failed):
        names = ", ".join(str(r) for r in silent)
        return "failed", (
            f"rank {names} ended without recording an outcome (killed or crashed), and the "
            "others lost their connection to it"
        )

    def rank_of(o: RankOutcome) -> tuple[int, int, float]:
        severity = {"oom": 0, "failed": 1, "timeout": 2}.get(o.status, 1)
        return (int(o.secondary), severity, o.time)

    first = min(failed, key=rank_of)
    sep = " " if first.unrecorded else ": "
    return first.status, f"rank {first.rank}{sep}{first.error}"
