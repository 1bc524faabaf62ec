"""Train several job configs in one process group (the tests' way to compare engines)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from harness.config import JobConfig, ProfileConfig
from harness.engines.registry import ENGINES


def train_jobs(
    rank: int, world_size: int, configs: list[JobConfig], root: str
) -> list[tuple[dict[str, Any], dict[str, Any]] | None]:
    """Each config's (metrics, engine settings) on this rank, trained one after another by
    the worker's own training function; None for a job that returned no result."""
    from harness.placement import Placement
    from harness.rank.run import train

    place = Placement(rank=rank, world_size=world_size, local_rank=rank,
                      local_world_size=world_size, device=torch.device("cpu"), backend="gloo",
                      threads=1)  # fmt: skip
    out: list[tuple[dict[str, Any], dict[str, Any]] | None] = []
    for i, cfg in enumerate(configs):
        result = train(cfg, Path(root) / f"job{i}", place)
        out.append((result.metrics.to_dict(), result.engine_settings) if result else None)
    return out


def short_job(label: str, world_size: int, **fields: Any) -> JobConfig:
    """A short unprofiled job of engine `label` on 1 thread per rank (llama_tiny unless
    `fields` says otherwise): what the tests train in one process group."""
    defaults: dict[str, Any] = dict(model="llama_tiny", warmup_steps=0, threads_per_rank=1)
    return JobConfig(
        **{**defaults, **fields},
        engine=ENGINES[label].config(),
        gpus=world_size,
        profile=ProfileConfig(steps=0),
    )


def shared_test_engines() -> list[str]:
    """The registered labels the tests that run every engine train: not the compiled
    variants (30-70 s of compiling per job on CPU; tests/engines/test_compile_blocks.py),
    and ya_fsdp only where the upstream library is installed (tests/engines/test_ya_fsdp.py)."""
    from harness.engines.upstream import available

    return [
        label
        for label, spec in ENGINES.items()
        if not spec.options.get("compile_blocks") and (spec.name != "ya_fsdp" or available())
    ]
