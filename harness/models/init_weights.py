"""Identical initial weights for every engine and world size.

Each parameter is drawn from its own generator seeded by (seed, parameter name), on the
device it lives on, so an engine that materialises a parameter alone, in any order, or
only its shard, gets exactly the values the unsharded reference gets on that device kind.
"""

from __future__ import annotations

import hashlib

import torch
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor

INIT_STD = 0.02


# Prefixes that wrappers (activation checkpointing, FSDP1) insert into parameter names.
WRAPPER_PREFIXES = ("_checkpoint_wrapped_module.", "_fsdp_wrapped_module.", "_orig_mod.")


def canonical_name(name: str) -> str:
    """The parameter's name in the unwrapped model."""
    for prefix in WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name


def param_seed(seed: int, name: str) -> int:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def initial_value(
    name: str, shape: torch.Size | tuple[int, ...], seed: int, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """The fp32 initial value of parameter `name`: norm weights 1, all else N(0, 0.02)."""
    device = torch.device(device)
    name = canonical_name(name)
    if name.split(".")[-2:-1] and name.split(".")[-2].endswith("norm"):
        return torch.ones(shape, device=device)
    gen = torch.Generator(device=device).manual_seed(param_seed(seed, name))
    return torch.randn(shape, generator=gen, device=device) * INIT_STD


@torch.no_grad()
def init_weights(model: nn.Module, seed: int, *, prefix: str = "") -> None:
    """Fill every parameter of `model` (plain or DTensor shard) from its (seed, name) generator.

    `prefix` is the module's qualified name inside the full model, for engines that
    initialise one submodule at a time.
    """
    for local_name, param in model.named_parameters():
        name = f"{prefix}{local_name}"
        if isinstance(param, DTensor):
            full = initial_value(name, param.shape, seed, param.device).to(param.dtype)
            shard = distribute_tensor(full, param.device_mesh, param.placements).to_local()
            param.to_local().copy_(shard)
        else:
            param.copy_(initial_value(name, param.shape, seed, param.device).to(param.dtype))
