"""Loss parity: every engine trains the same model on the same data to the same losses."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.config import EngineConfig, JobConfig, ProfileConfig
from tests.distributed import run_on_ranks

ENGINES = ("local", "fsdp1", "fsdp2")
STEPS = 3
# bf16 parameters round differently depending on how each engine groups its
# reductions (flat buffer vs per-parameter); over 3 steps the losses stay within 1e-3
# relative on llama_tiny.
BF16_RTOL = 1e-3
FP32_RTOL = 1e-5


def _config(engine: str, dtype: str, ckpt_layers: int, world_size: int) -> JobConfig:
    return JobConfig(
        model="llama_tiny",
        engine=EngineConfig(name=engine, label=engine),
        gpus=world_size,
        seq_len=64,
        ckpt_layers=ckpt_layers,
        dtype=dtype,
        warmup_steps=0,
        steps=STEPS,
        profile=ProfileConfig(steps=0),
        threads_per_rank=1,
    )


def _train_all(rank: int, world_size: int, configs: list[JobConfig], root: str) -> list:
    from harness.worker import train

    losses = []
    for i, cfg in enumerate(configs):
        result = train(cfg, Path(root) / f"job{i}", rank, world_size, torch.device("cpu"), 1)
        losses.append(result["metrics"]["losses"] if result else None)
    return losses


@pytest.mark.parametrize("world_size", [1, 2])
def test_engines_agree_on_losses(world_size: int, tmp_path: Path) -> None:
    cases = [(e, d, c) for d in ("fp32", "bf16") for e in ENGINES for c in (0, 2)]
    configs = [_config(e, d, c, world_size) for e, d, c in cases]
    rank0_losses = run_on_ranks(_train_all, world_size, configs, str(tmp_path))[0]
    losses = dict(zip(cases, rank0_losses, strict=True))

    for dtype, rtol in (("fp32", FP32_RTOL), ("bf16", BF16_RTOL)):
        reference = torch.tensor(losses[("local", dtype, 0)])
        assert len(reference) == STEPS
        for engine in ENGINES:
            for ckpt in (0, 2):
                got = torch.tensor(losses[(engine, dtype, ckpt)])
                torch.testing.assert_close(
                    got,
                    reference,
                    rtol=rtol,
                    atol=0,
                    msg=lambda m, e=engine, c=ckpt, d=dtype: f"{e} ckpt={c} {d}: {m}",
                )
