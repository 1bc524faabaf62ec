"""Loss and gradient-norm parity on Hugging Face models: every engine trains a 2-layer HF
Llama and a 2-layer Qwen2 (q/k/v biases; its first layer checkpointed) from local
config.json files to the same losses and global gradient norms as `local`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.config import JobConfig
from harness.engines.registry import REFERENCE
from tests.distributed import run_on_ranks
from tests.models.hf_configs import LLAMA, QWEN2, write_config
from tests.rank.training import shared_test_engines, short_job, train_jobs

pytest.importorskip("transformers")

STEPS = 3
CLIP = 0.5  # below these models' gradient norms, so clipping changes every update
RTOL = 1e-5  # fp32, as tests/engines/test_parity.py: rounding only, ~1e-7 per step
# (config, checkpointed layers): checkpointing is checked on the second family.
MODELS = {"llama": (LLAMA, 0), "qwen2": (QWEN2, 1)}


def _config(model: str, label: str, ckpt_layers: int, world_size: int) -> JobConfig:
    return short_job(
        label,
        world_size,
        model=model,
        model_impl="hf",
        seq_len=32,
        ckpt_layers=ckpt_layers,
        dtype="fp32",
        steps=STEPS,
        clip_grad_norm=CLIP,
    )


@pytest.mark.parametrize("world_size", [2, 3])
def test_engines_agree_on_hf_models(world_size: int, tmp_path: Path) -> None:
    paths = {name: write_config(tmp_path, name, cfg) for name, (cfg, _) in MODELS.items()}
    cases = [(name, engine) for name in MODELS for engine in shared_test_engines()]
    configs = [_config(paths[n], e, MODELS[n][1], world_size) for n, e in cases]
    jobs = str(tmp_path / "jobs")
    rank0 = run_on_ranks(train_jobs, world_size, configs, jobs, start_method="fork")[0]
    runs = dict(zip(cases, rank0, strict=True))

    for name in MODELS:
        reference = runs[(name, REFERENCE)][0]
        assert len(reference["losses"]) == len(reference["grad_norms"]) == STEPS
        assert min(reference["grad_norms"]) > CLIP, "clipping must be active to mean much"
    for (name, engine), (metrics, settings) in runs.items():
        assert settings["model_impl"] == "hf" and settings["attention"] == "sdpa"
        assert settings["ckpt_layers"] == MODELS[name][1]
        reference = runs[(name, REFERENCE)][0]
        where = f"{engine} on {name} at {world_size} ranks"
        for key in ("losses", "grad_norms"):
            torch.testing.assert_close(
                torch.tensor(metrics[key], dtype=torch.float64),
                torch.tensor(reference[key], dtype=torch.float64),
                rtol=RTOL,
                atol=0,
                msg=lambda m, w=where, k=key: f"{w}, {k}: {m}",
            )
    assert runs[("qwen2", "yafsdp")][1]["units"][0] == "model.embed_tokens"
    assert runs[("qwen2", "fsdp2")][1]["groups"][-1] == ["model.norm", "lm_head"]
