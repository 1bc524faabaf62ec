"""Check 4's reading of a CUDA allocator snapshot: which allocations the engine made.

A snapshot records each allocation's Python frames, innermost first. An allocation is the
engine's when the frame nearest to it that belongs to the project is engine code, and not
one of the engine frames that merely run the model's own forward.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

ENGINE_FILES = "yafsdp_impl"
MODEL_COMPUTE = {"__call__", "_checkpointed"}  # engine frames that run the user's forward
# The CUDA allocator's smallest block: a scalar (the clip norm and its coefficient) takes
# one. Anything larger made by the engine after the first step is a steady-state allocation.
SCALAR_BYTES = 512


def frames_of(entry: dict[str, Any]) -> list[dict[str, Any]]:
    frames = entry.get("frames")
    if frames is None and entry.get("history"):
        frames = entry["history"][-1].get("frames")
    return frames or []


def engine_frame(frames: list[dict[str, Any]]) -> str | None:
    """The engine function that made an allocation, or None when it is model compute or
    not the engine's at all. Frames run innermost first, as the snapshot records them."""
    for f in frames:
        filename = str(f.get("filename", ""))
        if "harness/models" in filename:
            return None  # model code nearer the allocation than any engine frame
        if ENGINE_FILES in filename:
            name = str(f.get("name", ""))
            return None if name in MODEL_COMPUTE else f"{Path(filename).name}:{name}"
    return None


def steady_offenders(trace: list[dict[str, Any]]) -> list[str]:
    """The engine functions that allocated more than a scalar in these trace entries (a
    device trace after the first step), sorted and without repeats."""
    return sorted(
        {
            f
            for e in trace
            if e.get("action") == "alloc" and int(e.get("size", 0)) > SCALAR_BYTES
            if (f := engine_frame(frames_of(e)))
        }
    )
