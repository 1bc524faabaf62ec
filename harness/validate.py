"""Pre-flight checks: refuse a config that cannot work before any process starts.

Every message names the field and says what to change.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from harness.config import (
    ADAMW_IMPLS,
    BACKENDS,
    DEVICES,
    DTYPES,
    FAULT_KINDS,
    MODEL_IMPLS,
    JobConfig,
)
from harness.engines.registry import ADAPTER_NAMES
from harness.fault_delay import delay_errors
from harness.models.shapes import (
    HF_CONFIG_PREFIX,
    MODEL_SHAPES,
    ModelShape,
    is_hf_config,
    shape_of,
)
from harness.node_split import node_split_error

# Bytes per parameter that a sharded engine keeps per rank, divided by the world size:
# fp32 master weight, fp32 gradient, two fp32 AdamW moments, and a bf16 shard copy.
SHARDED_BYTES_PER_PARAM = 4 + 4 + 8 + 2


def validation_errors(cfg: JobConfig, *, local_devices: int | None = None) -> list[str]:
    """All problems with `cfg`; empty when it can run.

    `local_devices` is the number of GPUs on this machine when launching locally on GPUs.
    """
    errors: list[str] = []
    if cfg.memory_snapshot and cfg.device == "cpu":
        errors.append(
            "memory_snapshot=true records the CUDA caching allocator's history, which a CPU "
            "job has not; drop memory_snapshot, or run on GPUs (device=cuda)"
        )
    if cfg.model_impl not in MODEL_IMPLS:
        errors.append(
            f"model_impl={cfg.model_impl!r} is unknown; choose one of: {', '.join(MODEL_IMPLS)}"
        )
    elif is_hf_config(cfg.model) and cfg.model_impl != "hf":
        errors.append(
            f"model={cfg.model!r} is a Hugging Face config, which only transformers can build, "
            f"but model_impl={cfg.model_impl} was given; drop model_impl (an hf: model implies "
            "model_impl=hf), or add model_impl=hf in its place"
        )
    elif cfg.model_impl == "hf":
        from harness.models.hf import transformers_missing

        missing = transformers_missing()
        if missing:
            errors.append(missing)
    if cfg.model not in MODEL_SHAPES and not is_hf_config(cfg.model):
        errors.append(
            f"model={cfg.model!r} is unknown; choose one of: {', '.join(MODEL_SHAPES)}, "
            f"or {HF_CONFIG_PREFIX}<path to a Hugging Face config.json>"
        )
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
    if cfg.engine.memory_budget_gb < 0:
        errors.append(
            f"engine.memory_budget_gb={cfg.engine.memory_budget_gb} must be 0 (the device's "
            "memory less the rest of the step) or a budget in GiB"
        )
    elif cfg.engine.memory_budget_gb and cfg.engine.name != "yafsdp":
        errors.append(
            f"engine.memory_budget_gb is yafsdp's buffer-plan budget, not {cfg.engine.name}'s; "
            "drop it, or use engine=yafsdp"
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
    else:
        errors.extend(delay_errors(cfg.fault, cfg.engine.name))
    for field in ("gpus", "seq_len", "micro_batch", "grad_accum", "steps", "gpus_per_node"):
        if getattr(cfg, field) < 1:
            errors.append(f"{field}={getattr(cfg, field)} must be at least 1")
    for field in ("warmup_steps", "ckpt_layers", "memory_limit_gb", "device_memory_gb"):
        if getattr(cfg, field) < 0:
            errors.append(f"{field}={getattr(cfg, field)} must be 0 or more")
    if cfg.threads_per_rank < 0:
        errors.append(f"threads_per_rank={cfg.threads_per_rank} must be 0 (cores / ranks) or more")
    for field in ("job_timeout_s", "collective_timeout_s"):
        if getattr(cfg, field) <= 0:
            errors.append(f"{field}={getattr(cfg, field)} must be more than 0 seconds")
    if errors:
        return errors

    shape = MODEL_SHAPES.get(cfg.model) or _hf_shape(cfg, errors)
    if shape is None:
        return errors
    if cfg.ckpt_layers > shape.n_layers:
        errors.append(
            f"ckpt_layers={cfg.ckpt_layers} is more than {cfg.model}'s {shape.n_layers} layers; "
            f"choose 0..{shape.n_layers}"
        )
    if cfg.seq_len > shape.max_seq_len:
        errors.append(
            f"seq_len={cfg.seq_len} is more than {cfg.model}'s max_seq_len={shape.max_seq_len}; "
            f"choose seq_len<={shape.max_seq_len}"
        )
    if split_error := node_split_error(cfg.gpus, cfg.gpus_per_node):
        errors.append(split_error)
    if cfg.fault.kind != "none" and not 0 <= cfg.fault.rank < cfg.gpus:
        errors.append(f"fault.rank={cfg.fault.rank} is not a rank of gpus={cfg.gpus}")
    if local_devices == 0:
        errors.append(
            f"device={cfg.device} asks for GPUs, but this machine has none; use "
            "hardware=cpu (or device=cpu) here, or run on a GPU machine or with "
            "hydra/launcher=slurm"
        )
    # gloo may put several ranks on one GPU (rank -> local_rank % GPUs); NCCL cannot
    elif local_devices is not None and cfg.gpus > local_devices and cfg.backend != "gloo":
        errors.append(
            f"gpus={cfg.gpus} is more than the {local_devices} GPUs on this machine, and NCCL "
            f"needs one GPU per rank; use gpus<={local_devices} here, backend=gloo to share "
            "GPUs (correctness checks), or hydra/launcher=slurm for more"
        )
    if cfg.device_memory_gb > 0:
        errors.extend(_fit_errors(cfg, shape.num_params()))
    return errors


def _hf_shape(cfg: JobConfig, errors: list[str]) -> ModelShape | None:
    """The shapes of `model=hf:<path>` (a one-layer build on meta, cached per process), or
    add why it cannot be trained."""
    from harness.models.hf import HFModelError

    try:
        shape = shape_of(cfg.model)
    except HFModelError as e:
        errors.append(f"model={cfg.model!r}: {e}")
        return None
    if shape.tied_embeddings:
        # Refused for every engine, so that matched jobs train the same model: the engines
        # shard the embedding and the output projection as separate units.
        errors.append(
            f"model={cfg.model!r} ties its output projection to the token embedding "
            f"(tie_word_embeddings), and engine={cfg.engine.name} cannot train that: yafsdp "
            "shards each unit on its own and refuses a weight held by two units, FSDP2 "
            "refuses one across groups, and the embedding and the output projection are "
            'separate units for every engine. Set "tie_word_embeddings": false in the '
            "config.json (training starts from fresh weights either way)"
        )
    return shape


def _fit_errors(cfg: JobConfig, num_params: int) -> list[str]:
    world = 1 if cfg.engine.name == "local" else cfg.gpus
    need = num_params * SHARDED_BYTES_PER_PARAM / world
    have = cfg.device_memory_gb * 2**30
    if need <= have:
        return []
    if world == 1 and cfg.engine.name == "local":  # more GPUs cannot help an unsharded copy
        return [
            f"model={cfg.model} needs {need / 2**30:.1f} GiB per device for weights, gradients "
            f"and AdamW state unsharded (engine=local keeps a whole copy on every device), "
            f"more than device_memory_gb={cfg.device_memory_gb}; use a sharded engine "
            f"({', '.join(e for e in ADAPTER_NAMES if e != 'local')}) or a smaller model"
        ]
    smallest = -(-num_params * SHARDED_BYTES_PER_PARAM // int(have))
    return [
        f"model={cfg.model} needs {need / 2**30:.1f} GiB per device for sharded weights, "
        f"gradients and AdamW state at gpus={world} (engine={cfg.engine.name}), more than "
        f"device_memory_gb={cfg.device_memory_gb}; use gpus>={smallest} or a smaller model"
    ]


def unknown_field_errors(values: dict[str, Any], schema: type = JobConfig) -> list[str]:
    """Keys in a composed config that no field of `schema` reads (a `+seqlen=512` typo).

    Hydra adds a `+key` that the schema lacks without complaint, and the job would run
    without it: refuse it, naming the field it most likely meant.
    """
    fields = {f.name: f for f in dataclasses.fields(schema)}
    errors = []
    for key, value in values.items():
        field = fields.get(key)
        if field is None:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f"did you mean {close[0]}=?" if close else "see the fields in harness/config.py"
            errors.append(f"{key} is not a field of the job config; {hint}")
        elif isinstance(value, dict) and dataclasses.is_dataclass(field.default_factory):
            nested = unknown_field_errors(value, field.default_factory)
            errors += [f"{key}.{e}" for e in nested]
    return errors
