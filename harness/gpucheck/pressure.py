"""Suite C's memory-pressure rows: the caching allocator's reserved peak and its retries
(`num_alloc_retries`) for fsdp1, fsdp2 and each yafsdp buffer plan, at one 70B-wide point
scaled to one GPU: Llama 3 70B's width with a few layers, one rank of 256 through the fake
process group, under an 80 GiB cap (`torch.cuda.set_per_process_memory_fraction`) where
the card holds more. Whether fragmentation is real, and how large, is what these rows
measure: YaFSDP's claim is that its preallocated buffers leave the allocator nothing to
fragment. On a machine without CUDA the same rows run on CPU at llama_small's width with
two layers: the plumbing, and every plan's bytes against `footprint`'s arithmetic.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

import torch

from harness.gpucheck.check_rows import Check, Verdict, run_check, skipped
from harness.models.shapes import ModelShape, get_shape

WIDTH_MODEL, LAYERS, WORLD, SEQ_LEN = "llama3_70b", 4, 256, 4096
REDUCED_MODEL, REDUCED_LAYERS, REDUCED_WORLD, REDUCED_SEQ_LEN = "llama_small", 2, 8, 4
CAP_GIB = 80.0
PLANS = ("alternating", "lean_alternating", "ends_shared", "separate_ends", "half_staging")
PROVES = (
    "reserved memory and allocator retries per engine and yafsdp buffer plan at a 70B-wide "
    "point under an 80 GiB cap (bytes by class equal to the arithmetic)"
)
Measure = Callable[..., Verdict]


def runs() -> list[tuple[str, str]]:
    """(engine label, yafsdp buffer plan or "auto") of every row."""
    return [("fsdp1", "auto"), ("fsdp2", "auto"), *(("yafsdp", p) for p in PLANS)]


def scaled_shape(reduced: bool) -> ModelShape:
    base = get_shape(REDUCED_MODEL if reduced else WIDTH_MODEL)
    return replace(base, n_layers=REDUCED_LAYERS if reduced else LAYERS)


@contextmanager
def capped(device: torch.device, cap_gib: float = CAP_GIB) -> Iterator[float | None]:
    """The process's share of the card held to `cap_gib` (restored after); yields the
    fraction set, None on CPU or a card no larger than the cap."""
    if device.type != "cuda":
        yield None
        return
    total = torch.cuda.get_device_properties(device).total_memory
    fraction = cap_gib * 2**30 / total
    if fraction >= 1:
        yield None
        return
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    try:
        yield fraction
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, device)


def run(device: torch.device, measure: Measure, point_type: type, *, reduced: bool,
        budget_s: float, start: float,
        on_row: Callable[[Check], None] = lambda row: None) -> list[Check]:  # fmt: skip
    """One row per engine and plan; rows past suite C's budget are skipped, not dropped."""
    shape = scaled_shape(reduced)
    world = REDUCED_WORLD if reduced else WORLD
    seq = REDUCED_SEQ_LEN if reduced else SEQ_LEN
    point = point_type(f"{shape.name}_x{shape.n_layers}_g{world}_s{seq}", shape.name, world,
                       seq, 0)  # fmt: skip
    rows = []
    with capped(device) as fraction:
        for label, plan in runs():
            name = f"8 pressure {point.name} {label}" + (f":{plan}" if plan != "auto" else "")
            if time.monotonic() - start > budget_s:
                why = f"suite C's {budget_s:.0f} s (what the deadline left) spent"
                row = skipped("C", name, PROVES, f"{why}; run `--suite C --deadline-s 560` alone")
            else:
                check = functools.partial(measure, point, label, device, shape, plan=plan)
                row = run_check("C", name, PROVES, check)
                if fraction is not None:
                    row.figures["cap_gib"] = CAP_GIB
            rows.append(row)
            on_row(row)
    return rows
