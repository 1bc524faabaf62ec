"""One Perfetto-ready trace of a whole job: every rank's trace in one file, each rank its
own process (`rank <r>`), its threads and streams kept apart and named as in its own trace.

Perfetto and chrome://tracing open one file at a time; a job has one per rank. Timestamps
are kept as each rank recorded them: ranks on one node share a clock, ranks on different
nodes may be offset (`harness.trace why` aligns them on the collectives' ends; this file
does not). No torch.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from harness.jobdir.paths import JobDir
from harness.trace.parse import TraceError
from harness.trace.summary import find_traces

MERGED_FILE = "merged.json.gz"
# metadata each rank's trace names its own processes and threads with; rewritten here
_OWN_METADATA = ("process_name", "process_labels", "process_sort_index", "thread_name")
# Flow ids (the arrows from a launch to its kernel) are unique within a rank's trace only.
FLOW_ID_STRIDE = 1 << 40


def _load(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt") as f:
            found = json.load(f)
    except (OSError, ValueError) as e:
        raise TraceError(f"{path}: not a readable trace ({e})") from e
    if isinstance(found, list):
        found = {"traceEvents": found}
    if not isinstance(found, dict) or not isinstance(found.get("traceEvents"), list):
        raise TraceError(f"{path}: not a Chrome trace (no traceEvents list)")
    return found


def _names(events: list[dict[str, Any]], kind: str) -> dict[Any, str]:
    """process_name (by pid) or thread_name (by (pid, tid)) metadata of one trace."""
    out = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == kind:
            key = e.get("pid") if kind == "process_name" else (e.get("pid"), e.get("tid"))
            out[key] = str((e.get("args") or {}).get("name", ""))
    return out


def rank_events(rank: int, trace: dict[str, Any]) -> list[dict[str, Any]]:
    """One rank's events moved into process `rank`, each (pid, tid) of its own trace a
    thread of that process, named after what it was."""
    events = trace["traceEvents"]
    processes, threads = _names(events, "process_name"), _names(events, "thread_name")
    lanes: dict[tuple[Any, Any], int] = {}
    out: list[dict[str, Any]] = []
    for e in events:
        if e.get("ph") == "M" and e.get("name") in _OWN_METADATA:
            continue
        lane = (e.get("pid"), e.get("tid"))
        moved = {**e, "pid": rank, "tid": lanes.setdefault(lane, len(lanes) + 1)}
        if isinstance(e.get("id"), int) and e.get("ph") in ("s", "t", "f"):
            moved["id"] = e["id"] + rank * FLOW_ID_STRIDE
        out.append(moved)
    meta = [
        {"ph": "M", "name": "process_name", "pid": rank, "tid": 0,
         "args": {"name": f"rank {rank}"}},
        {"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0,
         "args": {"sort_index": rank}},
    ]  # fmt: skip
    for (pid, tid), new in lanes.items():
        name = (threads.get((pid, tid)) or "").strip() or f"{processes.get(pid) or pid} {tid}"
        meta.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": new,
                     "args": {"name": name}})  # fmt: skip
    return meta + out


def merge_job(job_dir: Path | str, out: Path | str | None = None) -> tuple[Path, int, int]:
    """Write the job's merged trace (default `<job dir>/traces/merged.json.gz`); return its
    path, the ranks and the events in it."""
    traces = find_traces(job_dir)
    if not traces:
        raise TraceError(f"{job_dir}: no rank<r>.json[.gz] trace files under traces/")
    events: list[dict[str, Any]] = []
    for path in traces:
        rank = int(path.name.removeprefix("rank").split(".")[0])
        events += rank_events(rank, _load(path))
    target = Path(out) if out else JobDir(job_dir).traces / MERGED_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if target.suffix == ".gz" else open
    with opener(target, "wt") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)
    return target, len(traces), len(events)
