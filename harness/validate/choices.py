"""Fields that take one of a few values, and combinations of them that cannot work."""

from __future__ import annotations

from harness.config import (
    ADAMW_IMPLS,
    BACKENDS,
    DEVICES,
    DTYPES,
    FAULT_KINDS,
    MODEL_IMPLS,
    JobConfig,
)
from harness.models.shapes import HF_CONFIG_PREFIX, MODEL_SHAPES, is_hf_config
from harness.validate.common import one_of, present


def choice_errors(cfg: JobConfig) -> list[str]:
    """Each field outside its choices, and the choices that contradict each other."""
    return present(
        one_of("model_impl", cfg.model_impl, MODEL_IMPLS),
        _model_error(cfg),
        one_of("adamw_impl", cfg.adamw_impl, ADAMW_IMPLS),
        one_of("dtype", cfg.dtype, DTYPES),
        one_of("engine.reduce_dtype", cfg.engine.reduce_dtype, DTYPES),
        one_of("device", cfg.device, DEVICES),
        one_of("backend", cfg.backend, BACKENDS),
        one_of("fault.kind", cfg.fault.kind, FAULT_KINDS),
        _model_impl_error(cfg),
        _nccl_on_cpu(cfg),
        _snapshot_on_cpu(cfg),
    )


def _snapshot_on_cpu(cfg: JobConfig) -> str | None:
    if cfg.memory_snapshot and cfg.device == "cpu":
        return (
            "memory_snapshot=true records the CUDA caching allocator's history, which a CPU "
            "job has not; drop memory_snapshot, or run on GPUs (device=cuda)"
        )
    return None


def _model_error(cfg: JobConfig) -> str | None:
    if is_hf_config(cfg.model):
        return None
    more = f", or {HF_CONFIG_PREFIX}<path to a Hugging Face config.json>"
    return one_of("model", cfg.model, MODEL_SHAPES, more=more)


def _model_impl_error(cfg: JobConfig) -> str | None:
    if cfg.model_impl not in MODEL_IMPLS:
        return None
    if is_hf_config(cfg.model) and cfg.model_impl != "hf":
        return (
            f"model={cfg.model!r} is a Hugging Face config, which only transformers can build, "
            f"but model_impl={cfg.model_impl} was given; drop model_impl (an hf: model implies "
            "model_impl=hf), or add model_impl=hf in its place"
        )
    if cfg.model_impl == "hf":
        from harness.models.hf import transformers_missing

        return transformers_missing()
    return None


def _nccl_on_cpu(cfg: JobConfig) -> str | None:
    if cfg.backend == "nccl" and cfg.device == "cpu":
        return "backend=nccl needs CUDA GPUs but device=cpu; use backend=gloo on CPU"
    return None
