"""How the GPU hands out its SMs between streams: the constants of the give-way rules.

The simulator (`simulate.py`) follows four rules, each from a public source:
- a kernel on a stream of the compute stream's priority that becomes ready while a compute
  kernel holds the SMs waits for that kernel's last wave (blocks are dispatched in launch
  order, and running blocks are never preempted);
- a kernel on a higher-priority stream (-1) waits about one wave of the running kernel,
  then takes the SMs its blocks free;
- a collective needs SMs of its own (NCCL's blocks do not share an SM with compute
  blocks), so it waits as a kernel of its stream's priority does;
- an elementwise kernel over more than 2**31 bytes is launched several times.

Every default below comes from a public source, named beside it. A one-GPU probe can
measure the waits; its calibration file's `"give_way"` section overrides them
(`give_way_constants`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

# Keys a calibration's "give_way" section may carry besides the constants: where and when
# they were measured. They are kept out of the constants.
METADATA_KEYS = ("source", "device", "measured_at", "torch_version", "notes", "samples")


@dataclass(frozen=True)
class GiveWayConstants:
    # Fraction of the running compute kernel's remaining time that a kernel of equal
    # priority waits. CUDA Programming Guide, "Stream Priorities": pending blocks are
    # dispatched by priority, and at equal priority in launch order, so a kernel that
    # becomes ready behind a multi-wave GEMM gets SMs once the GEMM's last wave is placed
    # and retires; cudaStreamCreateWithPriority: running blocks are never preempted.
    # 1.0: it waits for the kernel's end.
    equal_priority_wait: float = 1.0
    # Waves of the running compute kernel that a higher-priority (-1) kernel waits: its
    # blocks are dispatched first as soon as the running wave's blocks retire (same
    # source: "pending work in higher priority streams takes preference").
    high_priority_wait_waves: float = 1.0
    # Fraction of the running compute kernel's remaining time that a collective of the
    # compute stream's priority waits: NCCL's blocks do not share an SM with compute
    # blocks (NVIDIA/nccl issue 689; issue 1431: "the next communication kernel will be
    # delayed until the gemm is completed").
    collective_equal_priority_wait: float = 1.0
    # Waves a collective on a higher-priority stream waits (the same dispatch rule).
    collective_high_priority_wait_waves: float = 1.0
    # SMs of the device, for the waves of a GEMM when the hardware profile names none
    # (NVIDIA Deep Learning Performance guide: an A100 contains 108 SMs).
    sm_count: int = 108
    # Waves a memory-bound (elementwise) kernel's blocks take: TensorIterator's
    # elementwise launch gives each block 4 x 128 elements (aten/src/ATen/native/cuda/
    # Loops.cuh, num_threads 128, thread_work_size 4), so any gradient-sized kernel has
    # thousands of waves and one of them is negligible; 0: derive from its size.
    memory_kernel_waves: float = 0.0
    # Bytes above which an elementwise kernel is launched more than once: TensorIterator
    # can_use_32bit_indexing (aten/src/ATen/TensorIterator.cpp) fails past 2**31 - 1 byte
    # offsets, and gpu_kernel then splits the iteration (with_32bit_indexing).
    index32_split_bytes: int = 2**31
    # Fraction of a running kernel's duration over which the ranks' phases spread: with
    # independent launches each rank is at a uniform phase of the kernel it runs when its
    # collective becomes ready (1.0); a probe across ranks can measure less.
    rank_phase_spread: float = 1.0
    # Probability that a chain's later link loses the race for the SMs to the compute kernel
    # that became pending with it (`slowest_rank.py`): two pending kernels of equal
    # priority, neither favoured, 1/2; the one-GPU probe measures it.
    race_loss_probability: float = 0.5


def _valid_fields() -> dict[str, type]:
    return {f.name: type(f.default) for f in dataclasses.fields(GiveWayConstants)}


def give_way_constants(calibration: dict[str, Any] | None) -> GiveWayConstants:
    """The constants, with any a calibration file's `"give_way"` section measured.

    `calibration` is the file's parsed JSON (or None: the public defaults). Unknown keys
    in the section (other than `METADATA_KEYS`) and values of the wrong type are errors
    that name the key."""
    if not calibration:
        return GiveWayConstants()
    section = calibration.get("give_way")
    if section is None:
        return GiveWayConstants()
    if not isinstance(section, dict):
        raise ValueError("calibration 'give_way' must be an object of constant: value")
    fields = _valid_fields()
    overrides: dict[str, Any] = {}
    for key, value in section.items():
        if key in METADATA_KEYS:
            continue
        if key not in fields:
            raise ValueError(
                f"calibration give_way.{key} is not a give-way constant; "
                f"use one of {sorted(fields)}"
            )
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"calibration give_way.{key} must be a number, got {value!r}")
        if value < 0:
            raise ValueError(f"calibration give_way.{key} must be >= 0, got {value}")
        overrides[key] = int(value) if fields[key] is int else float(value)
    return dataclasses.replace(GiveWayConstants(), **overrides)
