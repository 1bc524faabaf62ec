"""The Llama model family: shapes and counts (no torch) in `presets`, any named model's
shapes in `shapes`, the native modules in `llama`, Hugging Face transformers models in
`hf`, and what every job builds in `build`."""

from harness.models.shapes import MODEL_SHAPES, ModelShape, get_shape

__all__ = ["MODEL_SHAPES", "ModelShape", "get_shape"]
