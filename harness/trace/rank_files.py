"""A job's trace files are one per rank, each the trace of the rank its name says.

A summary over the files as found could stand on a subset of the ranks (a missing file
gives one rank's overlap for the job's), count a rank twice (`rank0.json` beside
`rank0.json.gz`) or take a copied file for another rank. Each is a TraceError here, in one
line naming the traces folder or file, so the job's profile says it instead of a figure.

`merge_job` writes a job's rank files as one Perfetto-ready trace: every rank its own
process (`rank <r>`), its threads and streams kept apart and named as in its own trace.
Perfetto and chrome://tracing open one file at a time. Timestamps are kept as each rank
recorded them: ranks on one node share a clock, ranks on different nodes may be offset
(`harness.trace why` aligns them on the collectives' ends; the merged file does not).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

from harness.jobdir.paths import JobDir
from harness.jobdir.result import CorruptResultError, read_result
from harness.trace.parse import TraceError

RANK_FILE = re.compile(r"^rank(\d+)\.json(\.gz)?$")


def file_rank(path: Path) -> int:
    """The rank a trace file's name gives (`rank3.json.gz` -> 3)."""
    m = RANK_FILE.match(path.name)
    if m is None:
        raise TraceError(f"{path}: not a rank<r>.json[.gz] trace file")
    return int(m.group(1))


def one_file_per_rank(paths: list[Path]) -> None:
    """Refuse two files of one rank: which of them is this job's cannot be told."""
    by_rank: dict[int, list[str]] = {}
    for p in paths:
        by_rank.setdefault(file_rank(p), []).append(p.name)
    twice = {r: names for r, names in by_rank.items() if len(names) > 1}
    if twice:
        r, names = min(twice.items())
        raise TraceError(
            f"{paths[0].parent}: rank {r} has {len(names)} trace files ({', '.join(names)}); "
            "keep the one this job wrote and remove the other"
        )


def _job_world_size(job_dir: Path) -> int | None:
    """The world size the job ran with, from its result.json (None: not recorded)."""
    try:
        gpus = read_result(JobDir(job_dir).result).config.get("gpus")
    except CorruptResultError:
        return None
    return gpus if isinstance(gpus, int) and gpus > 0 else None


def every_rank_once(
    job_dir: Path, paths: list[Path], summaries: list[dict[str, Any]], *, all_ranks: bool = True
) -> None:
    """Refuse a file whose trace is another rank's, and (`all_ranks`) a job whose ranks are
    not all there; the cross-rank diagnosis, which says how many ranks it saw, takes some.

    The world size is the job's result.json `gpus`, else what the traces record; a trace
    recorded with another world size is another job's."""
    for path, summary in zip(paths, summaries, strict=True):
        if summary["rank"] != file_rank(path):
            raise TraceError(
                f"{path}: holds rank {summary['rank']}'s trace (its distributedInfo), not rank "
                f"{file_rank(path)}'s: a copied file? Put each rank's own trace in its file"
            )
    recorded = {s["world_size"] for s in summaries if s.get("world_size") is not None}
    world = _job_world_size(job_dir)
    if world is None:
        if len(recorded) > 1:
            raise TraceError(
                f"{paths[0].parent}: the traces record different world sizes "
                f"({', '.join(map(str, sorted(recorded)))}): they are not of one job"
            )
        world = recorded.pop() if recorded else None
    elif recorded - {world}:
        raise TraceError(
            f"{paths[0].parent}: a trace records world_size {max(recorded - {world})}, the "
            f"job ran {world} ranks (gpus={world}): a trace of another job?"
        )
    if world is not None and all_ranks:  # else nothing says how many ranks there were
        _all_ranks(paths, world)


def _all_ranks(paths: list[Path], world: int) -> None:
    """Refuse files that are not ranks 0..world-1, each once."""
    found = {file_rank(p) for p in paths}
    missing = sorted(set(range(world)) - found)
    extra = sorted(found - set(range(world)))
    if missing or extra:
        what = f"no trace of rank {', '.join(map(str, missing))}" if missing else ""
        what += ("; " if what and extra else "") + (
            f"traces of rank {', '.join(map(str, extra))} beyond them" if extra else ""
        )
        raise TraceError(
            f"{paths[0].parent}: {what} (world_size {world}); a summary of the others "
            "would pass for the whole job's: profile the job again"
        )


def checked_traces(paths: list[Path]) -> list[Path]:
    """`paths`, once it is one file per rank (for the diagnosis tools, which read each
    trace's own rank and say how many of the job's ranks they saw)."""
    if paths:
        one_file_per_rank(paths)
    return paths


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
    folder = JobDir(job_dir).traces
    traces = sorted((p for p in folder.glob("rank*.json*") if RANK_FILE.match(p.name)),
                    key=file_rank)  # fmt: skip
    if not traces:
        raise TraceError(f"{job_dir}: no rank<r>.json[.gz] trace files under traces/")
    events: list[dict[str, Any]] = []
    for path in traces:
        rank = file_rank(path)
        events += rank_events(rank, _load(path))
    target = Path(out) if out else JobDir(job_dir).traces / MERGED_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if target.suffix == ".gz" else open
    with opener(target, "wt") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)
    return target, len(traces), len(events)
