"""Suite B: 2 and 3 ranks sharing one GPU through gloo, each engine against `local`.

Each job goes through the harness's own launcher (`run_job`) with device=cuda and
backend=gloo, so meta-device initialisation, FSDP1's device_id/param_init_fn and FSDP2's
to_empty all run on CUDA tensors. gloo moves data through the host, so this checks
numerics, not timing: losses and gradient norms step by step (`parity`).

One row per engine and world size: an engine that fails is its own row (with the job's
cause) and the others still run. The engines are those a bare GPU machine can run;
DeepSpeed and the upstream `ya_fsdp` run where installed, else their row is a skip that
says what to install. One more row trains transformers' LlamaForCausalLM
(`model_impl=hf`) with yafsdp and local at 2 ranks.
"""

from __future__ import annotations

import functools
import importlib.util
import tempfile
from collections.abc import Callable
from pathlib import Path

from harness.config import JobConfig, ProfileConfig
from harness.engines import upstream
from harness.engines.registry import REFERENCE, YAFSDP
from harness.gpucheck.check_rows import Check, Verdict, run_check, skipped
from harness.gpucheck.judging import Trace, compare
from harness.gpucheck.training import engine_config
from harness.models.hf import transformers_missing

# (world size, engine) of each row: 2 ranks for every engine, 3 (a shard that does not
# divide evenly) for yafsdp, the engine under test.
ROWS: tuple[tuple[int, str], ...] = (
    (2, "fsdp1"),
    (2, "fsdp2"),
    (2, YAFSDP),
    (2, "deepspeed"),
    (2, "ya_fsdp"),
    (3, YAFSDP),
)
# What an engine needs beyond a bare GPU machine's torch: the module and how to get it.
PACKAGES = {
    "deepspeed": ("deepspeed", "pip install deepspeed"),
    "ya_fsdp": ("ya_fsdp", upstream.INSTALL),
}
# fp32 on the same kernels: the engines differ only in how they group reductions and in
# the GPU's own non-deterministic attention backward, far below this.
RTOL = 1e-4
HF_WORLD_SIZE = 2
HF_ENGINE = YAFSDP
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


def job_trace(label: str, world_size: int, root: Path, model_impl: str = "native") -> Trace:
    """The job's losses and gradient norms; a failed job raises with its cause."""
    from harness.job.run import run_job

    config = job_config(label, world_size, model_impl)
    result = run_job(config, root / f"{label}_{model_impl}_g{world_size}").result
    if not result.ok:
        raise RuntimeError(f"{label} at {world_size} ranks: {result.status}: {result.error}")
    m = result.metrics
    return Trace(
        [float(x) for x in m.losses or [] if x is not None],
        [float(x) for x in m.grad_norms or [] if x is not None],
    )


def missing_package(label: str) -> str | None:
    """Why `label` cannot run on this machine (its package is absent, or for `ya_fsdp`
    fails to import), else None."""
    if label not in PACKAGES:
        return None
    module, install = PACKAGES[label]
    if label == "ya_fsdp":
        problem = upstream.import_problem()
    else:
        problem = None if importlib.util.find_spec(module) else "it is not installed"
    if problem is None:
        return None
    return f"{module}: {problem} on this machine (`{install}`): {label} not compared"


class References:
    """`local`'s run at each (world size, model), run once and kept, failure included."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.kept: dict[tuple[int, str], Trace | Exception] = {}

    def get(self, world_size: int, model_impl: str) -> Trace:
        key = (world_size, model_impl)
        if key not in self.kept:
            try:
                self.kept[key] = job_trace(REFERENCE, world_size, self.root, model_impl)
            except Exception as e:  # every row of this world size carries the cause
                self.kept[key] = e
        kept = self.kept[key]
        if isinstance(kept, Exception):
            raise RuntimeError(f"the reference could not run: {kept}") from kept
        return kept


def parity(label: str, world_size: int, refs: References, model_impl: str = "native") -> Verdict:
    """`label` against `local`, step by step, at `world_size` ranks."""
    if (why := missing_package(label)) is not None:
        return Verdict(False, {}, why, skipped=True)
    reference = refs.get(world_size, model_impl)
    got = job_trace(label, world_size, refs.root, model_impl)
    figures, problem = compare(label, got, reference, RTOL)
    figures["local_final_loss"] = round(reference.losses[-1], 5)
    return Verdict(not problem, figures, problem)


def check_hf(refs: References) -> Verdict:
    # a skip, not an error: the machine lacks a package, and the GPU checks still stand
    if transformers_missing() is not None:
        return Verdict(False, {}, NO_TRANSFORMERS, skipped=True)
    return parity(HF_ENGINE, HF_WORLD_SIZE, refs, "hf")


def _name(label: str, world_size: int, hf: bool = False) -> tuple[str, str]:
    model = "transformers' LlamaForCausalLM (model_impl=hf)" if hf else "llama_tiny"
    return (
        f"7 {'hf ' if hf else ''}parity {label} on {world_size} gloo ranks",
        f"{label} equals local in losses and gradient norms (fp32, rtol {RTOL:g}) training "
        f"{model} with {world_size} ranks sharing the GPU through gloo",
    )


NAMES = [*(_name(label, p) for p, label in ROWS), _name(HF_ENGINE, HF_WORLD_SIZE, hf=True)]


def work() -> dict[str, int]:
    """Suite B's jobs on this machine, for its estimate (harness.gpucheck.schedule): each
    runnable row's and one `local` reference per world size it uses."""
    runnable = [(p, label) for p, label in ROWS if missing_package(label) is None]
    hf = 2 if transformers_missing() is None else 0
    return {"job": len({p for p, _ in runnable}) + len(runnable) + hf}


def run(
    on_row: Callable[[Check], None] | None = None, time_left: Callable[[], float] | None = None
) -> list[Check]:
    """Every row in order; `on_row` is told of each as it is done. A row that would start
    with no time left (`time_left()`, the run's deadline) is a skipped row saying so."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        refs = References(Path(tmp))
        checks = [functools.partial(parity, label, p, refs) for p, label in ROWS]
        checks.append(functools.partial(check_hf, refs))
        for (name, proves), check in zip(NAMES, checks, strict=True):
            if time_left is not None and time_left() <= 0:
                rows.append(skipped("B", name, proves, "the run's deadline passed"))
            else:
                rows.append(run_check("B", name, proves, check))
            if on_row is not None:
                on_row(rows[-1])
    return rows


def skipped_rows(why: str) -> list[Check]:
    return [skipped("B", name, proves, why) for name, proves in NAMES]
