"""A `rerun=true` sweep can be resumed: what it measured since it began stands.

The sweep's start writes `<sweep dir>/.yafsdp-bench.rerun.json` (when rerun=true and the
file is not there yet) and its complete end removes it; an interrupted or killed sweep
leaves it, so the same command resumes the rerun instead of starting it over. A job's ok
result stands under rerun=true when it was measured after that start: its `started_at`
(or `ended_at`) in result.json, else the file's modification time.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

from harness.jobdir.paths import RESULT_FILE

MARK_FILE = ".yafsdp-bench.rerun.json"


def begin_rerun(sweep_dir: Path) -> float:
    """The start of the rerun this sweep runs: an unfinished one's, or now (recorded)."""
    since = rerun_since_in(sweep_dir)
    if since is not None:
        return since
    now = time.time()
    record = {"since": now, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (Path(sweep_dir) / MARK_FILE).write_text(json.dumps(record) + "\n")
    return now


def end_rerun(sweep_dir: Path) -> None:
    """Every job ran: a later rerun=true starts a new rerun."""
    (Path(sweep_dir) / MARK_FILE).unlink(missing_ok=True)


def rerun_since_in(sweep_dir: Path) -> float | None:
    """When the unfinished rerun of this sweep directory began; None where there is none."""
    try:
        since = json.loads((Path(sweep_dir) / MARK_FILE).read_text()).get("since")
    except (OSError, ValueError, AttributeError):
        return None
    return float(since) if isinstance(since, int | float) else None


def rerun_since(job_dir: Path) -> float | None:
    """The start of the unfinished rerun of the sweep holding `job_dir` (its nearest
    ancestor with a mark), or None."""
    for directory in Path(job_dir).resolve().parents:
        since = rerun_since_in(directory)
        if since is not None:
            return since
    return None


def measured_at(job_dir: Path) -> float | None:
    """When the job's result was measured: its recorded start (or end), else the time the
    file was written; None without a result."""
    path = Path(job_dir) / RESULT_FILE
    try:
        data = json.loads(path.read_text())
        stamp = next((data[k] for k in ("started_at", "ended_at") if data.get(k)), None)
        if isinstance(stamp, str):
            when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
            return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()
        return os.stat(path).st_mtime
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def measured_in_this_rerun(job_dir: Path) -> bool:
    """Whether the job's result was measured by the unfinished rerun its sweep resumes."""
    since = rerun_since(job_dir)
    at = measured_at(job_dir) if since is not None else None
    return since is not None and at is not None and at >= since
