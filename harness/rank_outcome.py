"""Each rank's own outcome on disk, and the job status decided from all of them.

Only one rank's return value reaches a launcher (and a crashed rank returns nothing), so
every rank records how it ended in `<job_dir>/ranks/rank<r>.json`, and the job's status
is decided from those files.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from harness.result import write_json_atomic

# Errors that a rank sees because *another* rank died first: never the root cause.
_SECONDARY_MARKERS = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "NCCL communicator was aborted",
)


def classify(error: BaseException) -> str:
    """Map an exception to a result status: oom, timeout or failed."""
    import torch

    if isinstance(error, MemoryError | torch.OutOfMemoryError):
        return "oom"
    text = str(error)
    if "out of memory" in text.lower():
        return "oom"
    if "timed out" in text.lower() or "timeout" in type(error).__name__.lower():
        return "timeout"
    return "failed"


def write_rank_outcome(
    job_dir: Path, rank: int, *, error: BaseException | None, trace: str = ""
) -> None:
    payload: dict[str, Any] = {"rank": rank, "time": time.time(), "status": "ok", "error": None}
    if error is not None:
        message = _short(f"{type(error).__name__}: {error}")
        payload.update(status=classify(error), error=message, traceback=trace)
    write_json_atomic(Path(job_dir) / "ranks" / f"rank{rank}.json", payload)


def _short(text: str, limit: int = 1000) -> str:
    return text if len(text) <= limit else text[:limit] + " ... (full traceback in ranks/)"


def read_rank_outcomes(job_dir: Path) -> list[dict[str, Any]]:
    outcomes = []
    for path in sorted((Path(job_dir) / "ranks").glob("rank*.json")):
        try:
            outcomes.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    return outcomes


def root_cause(outcomes: list[dict[str, Any]]) -> tuple[str, str] | None:
    """(status, 'rank r: error') of the failure that started it all, or None if none failed."""
    failed = [o for o in outcomes if o.get("status") != "ok"]
    if not failed:
        return None

    def rank_of(o: dict[str, Any]) -> tuple[int, int, float]:
        secondary = any(m in (o.get("error") or "") for m in _SECONDARY_MARKERS)
        severity = {"oom": 0, "failed": 1, "timeout": 2}.get(o["status"], 1)
        return (int(secondary), severity, o.get("time", 0.0))

    first = min(failed, key=rank_of)
    return first["status"], f"rank {first['rank']}: {first['error']}"
