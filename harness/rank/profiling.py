"""The profiled pass: a few extra steps under torch.profiler, written as a Chrome trace.

Runs after the timed steps; its step times are never used as timings. Each rank writes
`<out_dir>/traces/rank<r>.json.gz`, with `distributedInfo` (rank, world_size) in the trace
so that HolisticTraceAnalysis and `harness.trace` can tell the ranks apart.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from torch.profiler import ProfilerActivity, _ExperimentalConfig, profile, schedule

from harness.jobdir.paths import JobDir

_HEAD_BYTES = 1 << 16  # torch writes distributedInfo among the first top-level keys


def trace_path(out_dir: Path, rank: int) -> Path:
    return JobDir(out_dir).trace(rank)


def capture_profile(
    run_step: Callable[[int], None],
    *,
    steps: int,
    warmup: int,
    out_dir: Path,
    rank: int,
    world_size: int,
    use_cuda: bool,
    cuda_sync_events: bool = False,
) -> Path | None:
    """Run `warmup` + `steps` calls of run_step(i) under the profiler; record the last `steps`.

    run_step must finish its step's device work (synchronise) before returning.
    `cuda_sync_events` (CUDA only) also records stream waits and synchronisations.
    Returns the trace path, or None when steps == 0.
    """
    if steps <= 0:
        return None
    activities = [ProfilerActivity.CPU]
    if use_cuda:
        activities.append(ProfilerActivity.CUDA)
    path = trace_path(out_dir, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = _raw_trace_path(path, rank)
    with profile(
        activities=activities,
        schedule=schedule(wait=0, warmup=max(warmup, 0), active=steps, repeat=1),
        record_shapes=False,
        with_stack=False,
        profile_memory=False,
        experimental_config=_ExperimentalConfig(enable_cuda_sync_events=True)
        if use_cuda and cuda_sync_events
        else None,
    ) as prof:
        for i in range(max(warmup, 0) + steps):
            run_step(i)
            prof.step()
    prof.export_chrome_trace(str(raw))
    _gzip_with_rank(raw, path, rank=rank, world_size=world_size)
    return path


def _raw_trace_path(path: Path, rank: int) -> Path:
    """Where torch writes the uncompressed trace: beside the final one, unless the job
    directory's name holds a backslash (Hydra escapes `hf:<path>` as `hf\\:<path>`), which
    Kineto's writer turns into a path separator; then in the system's temporary folder."""
    if "\\" not in str(path):
        return path.with_name(f".rank{rank}.json.tmp")
    fd, name = tempfile.mkstemp(prefix=f"yafsdp-bench-rank{rank}-", suffix=".json")
    os.close(fd)
    return Path(name)


def _gzip_with_rank(raw: Path, out: Path, *, rank: int, world_size: int) -> None:
    """Compress the exported trace, adding distributedInfo when torch did not (no process
    group); streamed, so a large trace is never held in memory."""
    with open(raw, "rb") as src:
        head = src.read(_HEAD_BYTES)
        tmp = out.with_name(f".{out.name}.tmp")
        with gzip.open(tmp, "wb", compresslevel=6) as dst:
            if b'"distributedInfo"' in head:
                dst.write(head)
            else:
                brace = head.index(b"{")
                info = json.dumps({"rank": rank, "world_size": world_size})
                dst.write(head[: brace + 1])
                dst.write(f'\n  "distributedInfo": {info},'.encode())
                dst.write(head[brace + 1 :])
            shutil.copyfileobj(src, dst, 1 << 20)
    tmp.replace(out)
    raw.unlink()
