"""Pre-flight checks: refuse a config that cannot work before any process starts.

Every message names the field and says what to change.
"""

from __future__ import annotations

from harness.config import ADAMW_IMPLS, BACKENDS, DEVICES, DTYPES, FAULT_KINDS, JobConfig
from harness.engines.registry import ADAPTER_NAMES
from harness.models.shapes import MODEL_SHAPES

# Bytes per parameter that a sharded engine keeps per rank, divided by the world size:
# fp32 master weight, fp32 gradient, two fp32 AdamW moments, and a bf16 shard copy.
SHARDED_BYTES_PER_PARAM = 4 + 4 + 8 + 2


class InvalidConfig(ValueError):
    pass


def validation_errors(cfg: JobConfig, *, local_devices: int | None = None) -> list[str]:
    """All problems with `cfg`; empty when it can run.

    `local_devices` is the number of GPUs on this machine when launching locally on GPUs.
    """
    errors: list[str] = []
    if cfg.model not in MODEL_SHAPES:
        errors.append(f"model={cfg.model!r} is unknown; choose one of: {', '.join(MODEL_SHAPES)}")
    if cfg.engine.name not in ADAPTER_NAMES:
        errors.append(
            f"engine.name={cfg.engine.name!r} is unknown; choose one of: {', '.join(ADAPTER_NAMES)}"
        )
    if cfg.adamw_impl not in ADAMW_IMPLS:
        errors.append(
            f"adamw_impl={cfg.adamw_impl!r} is unknown; choose one of: {', '.join(ADAMW_IMPLS)}"
        )
    if not cfg.clip_grad_norm >= 0:
        errors.append(f"clip_grad_norm={cfg.clip_grad_norm} must be 0 (off) or a positive norm")
    if not cfg.engine.sync_every_micro_batch and cfg.engine.name != "fsdp2":
        errors.append(
            f"engine.sync_every_micro_batch=false is offered by fsdp2 only, not "
            f"{cfg.engine.name}; drop it, or use engine=fsdp2"
        )
    for field, value in (("dtype", cfg.dtype), ("engine.reduce_dtype", cfg.engine.reduce_dtype)):
        if value not in DTYPES:
            errors.append(f"{field}={value!r} is unknown; choose one of: {', '.join(DTYPES)}")
    if cfg.device not in DEVICES:
        errors.append(f"device={cfg.device!r} is unknown; choose one of: {', '.join(DEVICES)}")
    if cfg.backend not in BACKENDS:
        errors.append(f"backend={cfg.backend!r} is unknown; choose one of: {', '.join(BACKENDS)}")
    elif cfg.backend == "nccl" and cfg.device == "cpu":
        errors.append("backend=nccl needs CUDA GPUs but device=cpu; use backend=gloo on CPU")
    if cfg.fault.kind not in FAULT_KINDS:
        errors.append(
            f"fault.kind={cfg.fault.kind!r} is unknown; choose one of: {', '.join(FAULT_KINDS)}"
        )
    for field in ("gpus", "seq_len", "micro_batch", "grad_accum", "steps", "gpus_per_node"):
        if getattr(cfg, field) < 1:
            errors.append(f"{field}={getattr(cfg, field)} must be at least 1")
    for field in ("warmup_steps", "ckpt_layers"):
        if getattr(cfg, field) < 0:
            errors.append(f"{field}={getattr(cfg, field)} must be 0 or more")
    if errors:
        return errors

    shape = MODEL_SHAPES[cfg.model]
    if cfg.ckpt_layers > shape.n_layers:
        errors.append(
            f"ckpt_layers={cfg.ckpt_layers} is more than {cfg.model}'s {shape.n_layers} layers; "
            f"choose 0..{shape.n_layers}"
        )
    if cfg.gpus > cfg.gpus_per_node and cfg.gpus % cfg.gpus_per_node:
        errors.append(
            f"gpus={cfg.gpus} does not split into nodes of gpus_per_node={cfg.gpus_per_node}; "
            f"use a multiple of {cfg.gpus_per_node} (or at most {cfg.gpus_per_node})"
        )
    if cfg.fault.kind != "none" and not 0 <= cfg.fault.rank < cfg.gpus:
        errors.append(f"fault.rank={cfg.fault.rank} is not a rank of gpus={cfg.gpus}")
    # gloo may put several ranks on one GPU (rank -> local_rank % GPUs); NCCL cannot
    if local_devices is not None and cfg.gpus > local_devices and cfg.backend != "gloo":
        errors.append(
            f"gpus={cfg.gpus} is more than the {local_devices} GPUs on this machine, and NCCL "
            f"needs one GPU per rank; use gpus<={local_devices} here, backend=gloo to share "
            "GPUs (correctness checks), or hydra/launcher=slurm for more"
        )
    if cfg.device_memory_gb > 0:
        errors.extend(_fit_errors(cfg, shape.num_params()))
    return errors


def _fit_errors(cfg: JobConfig, num_params: int) -> list[str]:
    world = 1 if cfg.engine.name == "local" else cfg.gpus
    need = num_params * SHARDED_BYTES_PER_PARAM / world
    have = cfg.device_memory_gb * 2**30
    if need <= have:
        return []
    smallest = -(-num_params * SHARDED_BYTES_PER_PARAM // int(have))
    return [
        f"model={cfg.model} needs {need / 2**30:.1f} GiB per device for sharded weights, "
        f"gradients and AdamW state at gpus={world} (engine={cfg.engine.name}), more than "
        f"device_memory_gb={cfg.device_memory_gb}; use gpus>={smallest} or a smaller model"
    ]


def validate(cfg: JobConfig, *, local_devices: int | None = None) -> None:
    errors = validation_errors(cfg, local_devices=local_devices)
    if errors:
        raise InvalidConfig("invalid config:\n  - " + "\n  - ".join(errors))
