"""A job's trace files are one per rank, each the trace of the rank its name says.

A summary over the files as found could stand on a subset of the ranks (a missing file
gives one rank's overlap for the job's), count a rank twice (`rank0.json` beside
`rank0.json.gz`) or take a copied file for another rank. Each is a TraceError here, in one
line naming the traces folder or file, so the job's profile says it instead of a figure.
"""

from __future__ import annotations

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
