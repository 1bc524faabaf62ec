"""The shapes of any model a job names: a preset (`harness.models.presets`, no torch) or
the Hugging Face config that `hf:<path>` names (`harness.models.hf`, imported only then).

`hf` builds its shapes from `presets`, never from here, so the two do not import each other.
"""

from __future__ import annotations

from harness.models.presets import (
    HF_CONFIG_PREFIX,
    MODEL_SHAPES,
    ModelShape,
    get_shape,
    is_hf_config,
)

__all__ = [
    "HF_CONFIG_PREFIX",
    "MODEL_SHAPES",
    "ModelShape",
    "get_shape",
    "is_hf_config",
    "shape_of",
]


def shape_of(model: str) -> ModelShape:
    """The shapes of a preset, or of the Hugging Face config that `hf:<path>` names."""
    if model not in MODEL_SHAPES and is_hf_config(model):
        from harness.models.hf import config_shape

        return config_shape(model)
    return get_shape(model)
