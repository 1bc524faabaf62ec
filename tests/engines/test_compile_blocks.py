"""engine.compile_blocks: each block compiled after checkpointing and before sharding, the
compiled engines train to the reference's losses and norms, and a job records its graph
breaks and compile time apart from its steps. Compiled jobs cost 30-70 s each on CPU, so
there are two here (fsdp2_compile and yafsdp_compile, in one process group)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from harness.config import JobConfig
from harness.engines.compile_blocks import compile_blocks, use_sweep_cache
from harness.engines.registry import ENGINES
from tests.distributed import run_on_ranks
from tests.rank.training import short_job, train_jobs

CLIP = 0.5


def test_yafsdp_keeps_its_blocks_and_torchtitan_style_wraps_them() -> None:
    blocks = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
    originals = list(blocks)
    assert "forward" in compile_blocks(blocks, "yafsdp")
    assert list(blocks) == originals  # same modules: the engine's hooks go on them
    assert all("forward" in vars(b) for b in blocks)  # ... around a compiled forward
    blocks = nn.ModuleList([nn.Linear(4, 4)])
    assert "torchtitan" in compile_blocks(blocks, "fsdp2")
    assert isinstance(blocks[0], torch._dynamo.eval_frame.OptimizedModule)


def test_the_inductor_cache_lives_under_the_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    use_sweep_cache(tmp_path / "sweep" / "3")
    import os

    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "sweep" / "inductor_cache")


def test_a_compiled_job_needs_a_warm_up_step() -> None:
    from harness.validate import validation_errors

    cfg = JobConfig(engine=ENGINES["fsdp2_compile"].config(), warmup_steps=0)
    (error,) = validation_errors(cfg)
    assert "engine.compile_blocks=true" in error and "warmup_steps" in error


@pytest.mark.slow
def test_compiled_engines_match_the_reference_and_record_the_compile(tmp_path: Path) -> None:
    labels = ("local", "fsdp2_compile", "yafsdp_compile")
    configs = [
        short_job(
            label,
            2,
            seq_len=64,
            dtype="fp32",
            steps=3,
            ckpt_layers=1,
            clip_grad_norm=CLIP,
            warmup_steps=1,
        )  # fmt: skip
        for label in labels
    ]
    rank0 = run_on_ranks(train_jobs, 2, configs, str(tmp_path))[0]
    runs = dict(zip(labels, rank0, strict=True))
    reference = runs["local"][0]
    for label in labels[1:]:
        metrics, settings = runs[label]
        for key in ("losses", "grad_norms"):
            torch.testing.assert_close(
                torch.tensor(metrics[key], dtype=torch.float64),
                torch.tensor(reference[key], dtype=torch.float64),
                rtol=1e-5,
                atol=0,
                msg=lambda m, e=label, k=key: f"{e} {k}: {m}",
            )
        assert settings["compile_s"] > 0, label  # in warm-up, not in the timed steps
        assert settings["compile_graph_breaks"] >= 0 and "compile_blocks" in settings
