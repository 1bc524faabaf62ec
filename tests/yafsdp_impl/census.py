"""Which tensors the engine's own code allocates (model compute and the optimizer excluded)."""

from __future__ import annotations

import os
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import yafsdp_impl

# The engine package's own folder (these tests live in a folder of the same name).
_ENGINE_DIR = os.path.dirname(os.path.abspath(yafsdp_impl.__file__)) + os.sep
_MODEL_COMPUTE = {"__call__", "_checkpointed"}  # engine frames that run the user's forward


def _innermost_engine_frame():
    f = sys._getframe(2)
    while f is not None:
        if os.path.abspath(f.f_code.co_filename).startswith(_ENGINE_DIR):
            return f
        f = f.f_back
    return None


class EngineAllocations(TorchDispatchMode):
    """Records (op, bytes) for every new tensor storage created by engine code."""

    def __init__(self) -> None:
        super().__init__()
        self.allocations: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        frame = _innermost_engine_frame()
        if frame is not None and frame.f_code.co_name not in _MODEL_COMPUTE:
            inputs = {
                t.untyped_storage().data_ptr()
                for t in tree_leaves((args, kwargs))
                if isinstance(t, torch.Tensor)
            }
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                    self.allocations.append((str(func), t.untyped_storage().nbytes()))
        return out


class LargeReads(TorchDispatchMode):
    """Names of the ops that read a tensor of more than `numel` elements."""

    def __init__(self, numel: int) -> None:
        super().__init__()
        self.numel = numel
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        leaves = tree_leaves((args, kwargs))
        if any(isinstance(t, torch.Tensor) and t.numel() > self.numel for t in leaves):
            self.ops.add(str(func))
        return func(*args, **(kwargs or {}))
