"""One optimizer step, the same work for every engine: the timed unit of every benchmark.

Forward and backward of each micro-batch, the engine's gradient reduction, clipping by
the global gradient norm, the AdamW step and the engine's post-step work. Nothing here
reads a value back to the host, so a step's device work is never split by a sync.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from harness.engines.base import Wrapped
from harness.models.build import logits_of

Batch = tuple[torch.Tensor, torch.Tensor]


def forward_backward(
    wrapped: Wrapped, batch: Callable[[int], Batch], *, grad_accum: int
) -> torch.Tensor:
    """Forward and backward of every micro-batch, then the engine's gradient reduction;
    return the step's mean loss, still on the device."""
    step_loss = None
    for micro in range(grad_accum):
        wrapped.before_micro_batch(micro)
        inputs, targets = batch(micro)
        logits = logits_of(wrapped.module(inputs))
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        if wrapped.backward is None:
            (loss * wrapped.loss_scale).backward()
        else:
            wrapped.backward(loss * wrapped.loss_scale)
        part = loss.detach() / grad_accum
        step_loss = part if step_loss is None else step_loss + part
    wrapped.after_backward()
    assert step_loss is not None, "grad_accum must be at least 1"
    return step_loss


def clip_and_step(
    wrapped: Wrapped, optimizer: torch.optim.Optimizer, *, clip_grad_norm: float
) -> torch.Tensor | None:
    """Clip by the global gradient norm (when clip_grad_norm > 0), step the optimizer and
    the engine; return the norm before clipping, or None when clipping is off. An engine
    that owns its step (`Wrapped.step`) does all of that itself."""
    if wrapped.step is not None:
        return wrapped.step()
    grad_norm = wrapped.clip_grad_norm_(clip_grad_norm) if clip_grad_norm > 0 else None
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)
    wrapped.after_step()
    return grad_norm


def train_step(
    wrapped: Wrapped,
    optimizer: torch.optim.Optimizer,
    batch: Callable[[int], Batch],
    *,
    grad_accum: int,
    clip_grad_norm: float,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run one step; return its mean loss and the global gradient norm before clipping
    (None when clipping is off), both still on the device."""
    loss = forward_backward(wrapped, batch, grad_accum=grad_accum)
    return loss, clip_and_step(wrapped, optimizer, clip_grad_norm=clip_grad_norm)
