"""Deterministic synthetic token batches: the same for every engine at a given world size."""

from __future__ import annotations

import torch

from harness.models.init_weights import param_seed


def token_batch(
    *,
    seed: int,
    step: int,
    micro: int,
    rank: int,
    micro_batch: int,
    seq_len: int,
    vocab: int,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and next-token targets for one rank's micro-batch of one step.

    Drawn on `device` itself: a pageable host-to-GPU copy would synchronise the stream
    every micro-batch. The values depend on the device type, never on the engine."""
    gen = torch.Generator(device=device)
    gen.manual_seed(param_seed(seed, f"batch/{step}/{micro}/{rank}"))
    tokens = torch.randint(0, vocab, (micro_batch, seq_len + 1), generator=gen, device=device)
    return tokens[:, :-1], tokens[:, 1:]
