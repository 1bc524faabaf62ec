"""The arithmetic the GPU checks judge by, no torch (the report may read it).

Parity of two training runs: step by step, their losses and their gradient norms.

Losses alone hide gradient-scale bugs: with AdamW and clipping, gradients twice too large
leave every loss unchanged (AdamW divides by the root of its second moment; clipping by the
norm), while the norm before clipping doubles. A wrong 1/P or 1/accumulation factor, or a
wrong clip-norm branch, shows in the norms only.

Check 6's model of an injected communication delay, as plain arithmetic.

Each delayed all-gather can hide behind the computation that runs while it is in flight
(the previous unit's forward); what does not fit is exposed. With overlap the step grows
by sum(max(0, delay - hidden_behind)); a schedule that serialises communication and
computation grows by the full delay per collective instead. A measured growth proves the
overlap real when it matches the first and is clearly below the second.

Check 4's reading of a CUDA allocator snapshot: which allocations the engine made.

A snapshot records each allocation's Python frames, innermost first. An allocation is the
engine's when the frame nearest to it that belongs to the project is engine code, and not
one of the engine frames that merely run the model's own forward.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
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


def overlapped_growth(delay_s: float, hidden_behind_s: Sequence[float]) -> float:
    """Step-time growth when each delayed collective overlaps the compute listed for it."""
    if delay_s < 0:
        raise ValueError(f"delay_s={delay_s} must be 0 or more")
    return sum(max(0.0, delay_s - c) for c in hidden_behind_s)


def serial_growth(delay_s: float, n_collectives: int) -> float:
    """Step-time growth if nothing overlapped: every delay adds in full."""
    return delay_s * n_collectives


def forward_hiding(unit_forward_s: Sequence[float]) -> list[float]:
    """What each forward all-gather of a YaFSDP step hides behind, in issue order.

    The resident (norm) gather and unit 0's gather are waited on before any compute, so
    they hide behind nothing; unit i+1's gather is issued as unit i starts and hides
    behind unit i's forward. The last unit's forward hides no gather.
    """
    return [0.0, 0.0, *unit_forward_s[:-1]]


def judge(
    measured_s: float, expected_s: float, serial_s: float, *, tolerance: float = 0.25
) -> bool:
    """True when the measured growth is within `tolerance` x (serial - expected) of the
    overlap model, and so also nearer it than the serial one."""
    margin = tolerance * max(serial_s - expected_s, 0.0)
    return abs(measured_s - expected_s) <= margin


ENGINE_FILES = "yafsdp_impl"
MODEL_COMPUTE = {"__call__", "_checkpointed"}  # engine frames that run the user's forward
# The CUDA allocator's smallest block: a scalar (the clip norm and its coefficient) takes
# one. Anything larger made by the engine after the first step is a steady-state allocation.
SCALAR_BYTES = 512


def frames_of(entry: dict[str, Any]) -> list[dict[str, Any]]:
    frames = entry.get("frames")
    if frames is None and entry.get("history"):
        frames = entry["history"][-1].get("frames")
    return frames or []


def engine_frame(frames: list[dict[str, Any]]) -> str | None:
    """The engine function that made an allocation, or None when it is model compute or
    not the engine's at all. Frames run innermost first, as the snapshot records them."""
    for f in frames:
        filename = str(f.get("filename", ""))
        if "harness/models" in filename:
            return None  # model code nearer the allocation than any engine frame
        if ENGINE_FILES in filename:
            name = str(f.get("name", ""))
            return None if name in MODEL_COMPUTE else f"{Path(filename).name}:{name}"
    return None


def steady_offenders(trace: list[dict[str, Any]]) -> list[str]:
    """The engine functions that allocated more than a scalar in these trace entries (a
    device trace after the first step), sorted and without repeats."""
    return sorted(
        {
            f
            for e in trace
            if e.get("action") == "alloc" and int(e.get("size", 0)) > SCALAR_BYTES
            if (f := engine_frame(frames_of(e)))
        }
    )
