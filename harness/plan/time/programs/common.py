"""What each engine's step issues, in order: its program for the simulator (`simulate.py`).

A program interleaves the model's compute (per part: embedding, each block, the head and
loss; priced by `compute.py`) with what the engine adds: its collectives, on the one NCCL
stream of the process group, and its own memory-bound kernels, each on the stream the
engine puts it on, with the bytes it moves per element. The orders, streams and bytes are
read from each engine's code (torch 2.13) and checked against what the engines issue under
a fake process group (`tests/plan/test_plan_programs.py`). A unit is named by its module
path, as the trace tools name it (`harness.models.unit_names`: tok_embeddings, layers.3,
output):

FSDP1's program is in `fsdp1_program.py`, FSDP2's in `fsdp2_program.py`.

local: the whole model on every rank, one fp32 all-reduce of all gradients.

yafsdp's program comes from its own schedule, run on the meta device (`yafsdp_program.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from harness.models.unit_names import unit_names
from harness.plan.time.simulate import COMM, COMPUTE, Op

FP32 = 4
# Fused AdamW per sharded element: reads master, grad and both moments, writes master and
# both moments (fp32 each).
ADAMW_BYTES = 7 * FP32


@dataclass(frozen=True, slots=True)
class PartCost:
    """One part of the model in one phase: device seconds on the compute stream, the
    kernels the host launches for it, and each kernel's seconds and waves in launch order
    (what a kernel on another stream meets: `handout.py`)."""

    seconds: float
    kernels: int
    times: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class ModelCosts:
    """Forward and backward of each part, in execution order: embedding, the blocks, the
    head (final norm, output projection and loss). A checkpointed block's backward
    includes its recomputed forward."""

    forward: list[PartCost]
    backward: list[PartCost]


@dataclass(frozen=True)
class StepContext:
    """What a program needs besides the model: prices and the engine's settings."""

    world_size: int
    grad_accum: int
    param_bytes: int
    reduce_bytes: int
    collective_s: Callable[[str, float], float]  # (kind, bytes) -> seconds
    memory_s: Callable[[float], float]  # bytes read and written -> seconds of one kernel
    launch_s: float  # host time to launch one kernel
    hook_s: float  # host time of an engine's hook (per unit, forward and backward)
    mechanisms: frozenset[str]  # switched on
    split_bytes: int = 2**31  # an elementwise operand past this is launched in pieces

    def on(self, mechanism: str) -> bool:
        return mechanism in self.mechanisms


@dataclass
class Program:
    """Builds a program: operations in issue order, each named uniquely."""

    ctx: StepContext
    ops: list[Op] = field(default_factory=list)
    _count: int = 0

    def add(
        self,
        stream: str,
        seconds: float,
        term: str,
        *,
        label: str,
        waits: tuple[str | None, ...] = (),
        host_waits: tuple[str | None, ...] = (),
        host_s: float = 0.0,
        unit: str = "",
        kind: str = "",
        nbytes: int = 0,
        kernels: tuple[tuple[float, float], ...] = (),
        launches: int = 1,
    ) -> str:
        self._count += 1
        name = f"{self._count}:{label}"
        self.ops.append(
            Op(
                name=name,
                stream=stream,
                seconds=seconds,
                term=term,
                waits=tuple(w for w in waits if w),
                host_waits=tuple(w for w in host_waits if w),
                host_s=host_s,
                unit=unit,
                kind=kind,
                nbytes=nbytes,
                kernels=kernels,
                launches=launches,
            )
        )
        return name

    def compute(self, part: PartCost, label: str, unit: str, waits: tuple = ()) -> str:
        host = part.kernels * self.ctx.launch_s if self.ctx.on("launch_overhead") else 0.0
        return self.add(COMPUTE, part.seconds, "compute", label=label, unit=unit,
                        waits=waits, host_s=host, kernels=part.times)  # fmt: skip

    def memory(
        self, nbytes: float, term: str, label: str, *, stream: str = COMPUTE, unit: str = "",
        waits: tuple = (), kernels: int = 1, launches: int = 1,
    ) -> str:  # fmt: skip
        """`kernels` kernels moving `nbytes` in all (priced as one); `launches`: pieces one
        kernel is launched in (`split_launches`), each a kernel of its own."""
        host = kernels * launches * self.ctx.launch_s if self.ctx.on("launch_overhead") else 0.0
        seconds = self.ctx.memory_s(nbytes) + (launches - 1) * self.ctx.memory_s(0)
        return self.add(stream, seconds, term, label=label, unit=unit, waits=waits,
                        host_s=host, nbytes=int(nbytes), launches=launches)  # fmt: skip

    def collective(
        self, kind: str, nbytes: float, unit: str, *, waits: tuple = (), host_waits: tuple = ()
    ) -> str:
        host = self.ctx.launch_s if self.ctx.on("launch_overhead") else 0.0
        return self.add(COMM, self.ctx.collective_s(kind, nbytes), "comm",
                        label=f"{kind}.{unit}", unit=unit, kind=kind, nbytes=int(nbytes),
                        waits=waits, host_waits=host_waits, host_s=host)  # fmt: skip

    def hook(self, label: str, unit: str) -> None:
        """An engine's per-unit Python hook: host time only."""
        if self.ctx.on("launch_overhead") and self.ctx.hook_s:
            self.add(COMPUTE, 0.0, "launch_overhead", label=f"hook.{label}", unit=unit,
                     host_s=self.ctx.hook_s)  # fmt: skip

    def marker(self, stream: str, label: str) -> str:
        """An event recorded on `stream` now: done when everything issued there is."""
        return self.add(stream, 0.0, "event", label=label)

    def last(self, stream: str) -> str | None:
        for op in reversed(self.ops):
            if op.stream == stream:
                return op.name
        return None


def optimizer_step(prog: Program, shard_elements: int, unit: str = "shards") -> None:
    """Clipping's scale of the sharded gradients and the fused AdamW step, on the compute
    stream after the reductions."""
    prog.memory(2 * FP32 * shard_elements, "optimizer", "clip.scale", unit=unit)
    adamw_step(prog, shard_elements, unit)


def adamw_step(prog: Program, shard_elements: int, unit: str = "shards") -> None:
    prog.memory(ADAMW_BYTES * shard_elements, "optimizer", "adamw", unit=unit)


def split_launches(operand_bytes: int, split_bytes: int) -> int:
    """Launches of one elementwise kernel whose largest operand is `operand_bytes`:
    TensorIterator halves an iteration that cannot use 32-bit indexing until each piece
    can (aten/src/ATen/native/cuda/Loops.cuh gpu_kernel, TensorIterator.cpp
    with_32bit_indexing, can_use_32bit_indexing)."""
    launches = 1
    while operand_bytes > launches * (split_bytes - 1):
        launches *= 2
    return launches


def clip_and_step(prog: Program, shard: int) -> None:
    """The gradient norm of the shards (one read), its scalar all-reduce, then the scale
    and the optimizer step, which wait for it."""
    norm = prog.memory(FP32 * shard, "optimizer", "clip.norm", unit="shards")
    total = prog.collective("all_reduce", 8, "clip", waits=(norm,))
    prog.add(COMPUTE, 0.0, "event", label="clip.wait", waits=(total,))
    optimizer_step(prog, shard)


# ---- local -------------------------------------------------------------------------------


def local_program(costs: ModelCosts, params: int, ctx: StepContext) -> list[Op]:
    """Unsharded: every part computes, then one fp32 all-reduce of every gradient."""
    prog = Program(ctx)
    names = unit_names(len(costs.forward) - 2)
    for _micro in range(ctx.grad_accum):
        for i, part in enumerate(costs.forward):
            prog.compute(part, f"forward.{names[i]}", names[i])
        for i in reversed(range(len(costs.backward))):
            prog.compute(costs.backward[i], f"backward.{names[i]}", names[i])
    prog.memory((ctx.param_bytes + FP32) * params, "local_grad_cast", "grad_cast", unit="all")
    total = prog.collective("all_reduce", params * FP32, "all",
                            waits=(prog.last(COMPUTE),))  # fmt: skip
    prog.add(COMPUTE, 0.0, "event", label="all_reduce.wait", waits=(total,))
    prog.memory(FP32 * params, "optimizer", "clip.norm", unit="all")
    optimizer_step(prog, params, unit="all")
    return prog.ops
