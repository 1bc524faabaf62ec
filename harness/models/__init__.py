"""The Llama model family: shapes and counts (no torch) in `shapes`, modules in `llama`."""

from harness.models.shapes import MODEL_SHAPES, ModelShape, get_shape

__all__ = ["MODEL_SHAPES", "ModelShape", "get_shape"]
