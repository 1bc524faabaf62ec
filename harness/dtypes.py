"""The job's dtype names as torch dtypes: the one table every part of the harness reads."""

from __future__ import annotations

import torch

# The job's dtype names (JobConfig.dtype, EngineConfig.reduce_dtype) as torch dtypes.
DTYPES: dict[str, torch.dtype] = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
}
