"""Parity of two training runs: step by step, their losses and their gradient norms.

Losses alone hide gradient-scale bugs: with AdamW and clipping, gradients twice too large
leave every loss unchanged (AdamW divides by the root of its second moment; clipping by the
norm), while the norm before clipping doubles. A wrong 1/P or 1/accumulation factor, or a
wrong clip-norm branch, shows in the norms only. No torch here: the report may read it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Trace:
    """One run's per-step losses and global gradient norms before clipping."""

    losses: list[float]
    grad_norms: list[float]


def max_rel_diff(got: Sequence[float], want: Sequence[float]) -> float:
    """The largest |got - want| / |want| over the steps (inf when the lengths differ)."""
    if len(got) != len(want) or not want:
        return float("inf")
    return max(abs(a - b) / abs(b) if b else abs(a - b) for a, b in zip(got, want, strict=True))


def compare(label: str, got: Trace, reference: Trace, rtol: float) -> tuple[dict[str, Any], str]:
    """Figures (`<label>_loss_max_rel_diff`, `<label>_grad_norm_max_rel_diff`) and what
    differs beyond `rtol` ('' when nothing does)."""
    loss_diff = max_rel_diff(got.losses, reference.losses)
    norm_diff = max_rel_diff(got.grad_norms, reference.grad_norms)
    figures = {
        f"{label}_loss_max_rel_diff": loss_diff,
        f"{label}_grad_norm_max_rel_diff": norm_diff,
    }
    bad = []
    if not loss_diff <= rtol:
        bad.append(f"losses {_short(got.losses)} vs {_short(reference.losses)}")
    if not norm_diff <= rtol:
        bad.append(f"grad norms {_short(got.grad_norms)} vs {_short(reference.grad_norms)}")
    return figures, f"{label}: {'; '.join(bad)}" if bad else ""


def _short(values: Sequence[float]) -> str:
    return "[" + ", ".join(f"{v:.7g}" for v in values) + "]"
