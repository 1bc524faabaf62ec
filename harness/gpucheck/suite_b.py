"""Suite B: 2 and 3 ranks sharing one GPU through gloo, every engine against `local`.

Each job goes through the harness's own launcher (`run_job`) with device=cuda and
backend=gloo, so meta-device initialisation, FSDP1's device_id/param_init_fn and FSDP2's
to_empty all run on CUDA tensors. gloo moves data through the host, so this checks
numerics, not timing.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

from harness.config import JobConfig, ProfileConfig
from harness.gpucheck.outcome import Check, Verdict, run_check
from harness.gpucheck.training import engine_config

WORLD_SIZES = (2, 3)
ENGINES = ("fsdp1", "fsdp2", "fsdp2_tuned", "yafsdp")
# fp32 on the same kernels: the engines differ only in how they group reductions and in
# the GPU's own non-deterministic attention backward, far below this.
RTOL = 1e-4


def job_config(label: str, world_size: int) -> JobConfig:
    return JobConfig(
        model="llama_tiny",
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


def job_losses(label: str, world_size: int, root: Path) -> list[float]:
    from harness.job import run_job

    result = run_job(job_config(label, world_size), root / f"{label}_g{world_size}").result
    if not result.ok:
        raise RuntimeError(f"{label} at {world_size} ranks: {result.status}: {result.error}")
    return [float(x) for x in result.metrics.losses or [] if x is not None]


def check_world(world_size: int) -> Verdict:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        reference = job_losses("local", world_size, root)
        figures: dict[str, float] = {"local_final_loss": round(reference[-1], 5)}
        bad = []
        for label in ENGINES:
            got = job_losses(label, world_size, root)
            diff = max(abs(a - b) / abs(b) for a, b in zip(got, reference, strict=True))
            figures[f"{label}_max_rel_diff"] = diff
            if diff > RTOL:
                bad.append(f"{label}: {got} vs local {reference}")
    return Verdict(not bad, figures, "; ".join(bad))


# (name, what it proves) of each row, one per world size
NAMES = [
    (
        f"7 parity on {p} gloo ranks",
        f"fsdp1, fsdp2, fsdp2_tuned and yafsdp equal local (fp32, rtol {RTOL:g}) with "
        f"{p} ranks sharing the GPU through gloo: CUDA init paths of every engine",
    )
    for p in WORLD_SIZES
]


def run() -> list[Check]:
    return [
        run_check("B", name, proves, functools.partial(check_world, p))
        for p, (name, proves) in zip(WORLD_SIZES, NAMES, strict=True)
    ]
