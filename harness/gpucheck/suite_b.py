"""Suite B: 2 and 3 ranks sharing one GPU through gloo, every engine against `local`.

Each job goes through the harness's own launcher (`run_job`) with device=cuda and
backend=gloo, so meta-device initialisation, FSDP1's device_id/param_init_fn and FSDP2's
to_empty all run on CUDA tensors. gloo moves data through the host, so this checks
numerics, not timing. One more row trains transformers' LlamaForCausalLM (`model_impl=hf`)
with yafsdp and local at 2 ranks; it is skipped, saying how to fix it, when transformers is
not installed.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

from harness.config import JobConfig, ProfileConfig
from harness.engines.registry import BASELINES, REFERENCE, YAFSDP
from harness.gpucheck.check_rows import Check, Verdict, run_check
from harness.gpucheck.training import engine_config
from harness.models.hf import transformers_missing

WORLD_SIZES = (2, 3)
ENGINES = (*BASELINES, YAFSDP)
# fp32 on the same kernels: the engines differ only in how they group reductions and in
# the GPU's own non-deterministic attention backward, far below this.
RTOL = 1e-4
HF_WORLD_SIZE = 2
HF_ENGINES = (YAFSDP,)
NO_TRANSFORMERS = "transformers is not installed: run `make gpu-wheels` and carry wheels/"


def job_config(label: str, world_size: int, model_impl: str = "native") -> JobConfig:
    return JobConfig(
        model="llama_tiny",
        model_impl=model_impl,
        engine=engine_config(label),
        gpus=world_size,
        seq_len=64,
        ckpt_layers=1,
        grad_accum=2,
        dtype="fp32",
        warmup_steps=0,
        steps=3,
        device="cuda",
        backend="gloo",
        threads_per_rank=1,
        collective_timeout_s=120.0,
        job_timeout_s=300.0,
        profile=ProfileConfig(steps=0),
    )


def job_losses(label: str, world_size: int, root: Path, model_impl: str = "native") -> list[float]:
    from harness.job.run import run_job

    config = job_config(label, world_size, model_impl)
    result = run_job(config, root / f"{label}_{model_impl}_g{world_size}").result
    if not result.ok:
        raise RuntimeError(f"{label} at {world_size} ranks: {result.status}: {result.error}")
    return [float(x) for x in result.metrics.losses or [] if x is not None]


def parity(world_size: int, engines: tuple[str, ...], model_impl: str = "native") -> Verdict:
    """Each of `engines` against `local`, loss by loss, at `world_size` ranks."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        reference = job_losses(REFERENCE, world_size, root, model_impl)
        figures: dict[str, float] = {"local_final_loss": round(reference[-1], 5)}
        bad = []
        for label in engines:
            got = job_losses(label, world_size, root, model_impl)
            diff = max(abs(a - b) / abs(b) for a, b in zip(got, reference, strict=True))
            figures[f"{label}_max_rel_diff"] = diff
            if diff > RTOL:
                bad.append(f"{label}: {got} vs local {reference}")
    return Verdict(not bad, figures, "; ".join(bad))


def check_world(world_size: int) -> Verdict:
    return parity(world_size, ENGINES)


def check_hf() -> Verdict:
    # a skip, not an error: the machine lacks a package, and the GPU checks still stand
    if transformers_missing() is not None:
        return Verdict(False, {}, NO_TRANSFORMERS, skipped=True)
    return parity(HF_WORLD_SIZE, HF_ENGINES, "hf")


# (name, what it proves) of each row, one per world size
WORLD_NAMES = [
    (
        f"7 parity on {p} gloo ranks",
        f"fsdp1, fsdp2, fsdp2_tuned and yafsdp equal local (fp32, rtol {RTOL:g}) with "
        f"{p} ranks sharing the GPU through gloo: CUDA init paths of every engine",
    )
    for p in WORLD_SIZES
]
HF_NAME = (
    f"7 hf parity on {HF_WORLD_SIZE} gloo ranks",
    f"yafsdp equals local (fp32, rtol {RTOL:g}) training transformers' LlamaForCausalLM "
    f"(model_impl=hf) with {HF_WORLD_SIZE} ranks sharing the GPU through gloo",
)
NAMES = [*WORLD_NAMES, HF_NAME]


def run() -> list[Check]:
    rows = [
        run_check("B", name, proves, functools.partial(check_world, p))
        for p, (name, proves) in zip(WORLD_SIZES, WORLD_NAMES, strict=True)
    ]
    return [*rows, run_check("B", *HF_NAME, check_hf)]
