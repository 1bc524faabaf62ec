"""Checks that need the model's shapes: layers to checkpoint, sequence length, a Hugging
Face config that can be trained, and whether weights, gradients and AdamW state fit."""

from __future__ import annotations

from harness.config import JobConfig
from harness.engines.registry import ADAPTER_NAMES
from harness.models.shapes import MODEL_SHAPES, ModelShape, shape_of
from harness.node_split import node_split_error

# Bytes per parameter that a sharded engine keeps per rank, divided by the world size:
# fp32 master weight, fp32 gradient, two fp32 AdamW moments, and a bf16 shard copy.
SHARDED_BYTES_PER_PARAM = 4 + 4 + 8 + 2


def model_errors(cfg: JobConfig) -> list[str]:
    errors: list[str] = []
    if split_error := node_split_error(cfg.gpus, cfg.gpus_per_node):
        errors.append(split_error)
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
    except Exception as e:  # transformers' own failure on a config it accepted
        errors.append(
            f"model={cfg.model!r}: transformers could not build a model of it "
            f"({type(e).__name__}: {e}); check the config.json's sizes"
        )
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
