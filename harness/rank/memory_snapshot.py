"""`memory_snapshot=true`: the CUDA caching allocator's history over two steps after the
timed ones, dumped as `<job dir>/memory_snapshot/rank<r>.pickle` for
https://pytorch.org/memory_viz (as torchtitan's `enable_memory_snapshot` does). The timed
steps run without the recording, so their times are untouched. CUDA only: the validation
refuses it on CPU before any rank starts.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

SNAPSHOT_DIR = "memory_snapshot"
STEPS = 2
MAX_ENTRIES = 100_000  # allocator events kept (torchtitan's default)


def snapshot_path(job_dir: Path, rank: int) -> Path:
    return Path(job_dir) / SNAPSHOT_DIR / f"rank{rank}.pickle"


def record_snapshot(step: Callable[[], None], device: torch.device, out: Path) -> Path | None:
    """Run `step` STEPS times with the allocator's history recorded, then dump it to `out`;
    None on a device without a CUDA allocator."""
    if device.type != "cuda":
        return None
    memory = torch.cuda.memory
    memory._record_memory_history(max_entries=MAX_ENTRIES)
    try:
        for _ in range(STEPS):
            step()
        torch.cuda.synchronize(device)
        out.parent.mkdir(parents=True, exist_ok=True)
        memory._dump_snapshot(str(out))
    finally:
        memory._record_memory_history(enabled=None)
    return out
