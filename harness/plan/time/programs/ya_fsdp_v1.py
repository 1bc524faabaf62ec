"""Upstream YaFSDP v1 as published: the program of the runs in its README (`ya_fsdp_v1`).

yandex/YaFSDP at the release commit 0bd33e7, `ya_fsdp/ya_fsdp.py`, ZeRO-3, as its
transformers patch wraps Llama (`patches/transformers.diff`: the embedding, each decoder
layer and the head are units; every norm is in one tensor gathered once). The published
runs used torch 2.3 (NGC 24.02, `docker/Dockerfile`). What one step issues:
- one communication stream, `torch.cuda.Stream(priority=-1)` (`_comm_stream`, line 68);
  every collective is issued from it synchronously (`async_op=False`), so at torch 2.3 its
  NCCL kernels run on ProcessGroupNCCL's own stream at priority 0 and the comm stream then
  waits for them (`streams.py`);
- two weight buffers and two gradient buffers, reused in turn (`ReusableBuffer`): unit l's
  all-gather waits for unit l-2's compute to release its weight buffer (`_free`);
- forward: each unit's pre-hook all-gathers it (`get_forward_pre_hook`); the host runs
  ahead, so the gather of unit l runs beside unit l-1's compute;
- backward: unit l's pre-hook (`get_backward_pre_hook`) first takes its gradient buffer,
  which frees the buffer's owner, unit l+2: on the comm stream the bf16 gradient is copied
  into the fp32 buffer (`get_buffer_to_reduce_scatter`, `copy_`) and reduce-scattered into
  the fp32 master gradient (`reduce_scatter_grad`), and the compute stream waits for that
  (`_released_event.wait()` on the buffer's prepare stream, the compute stream); then it
  all-gathers unit l (`all_gather`), and the compute stream waits for the gather;
- the end of backward (`_get_backward_hook`) frees every buffer (the last reduce-scatters),
  waits for the comm stream, then divides the sharded gradient once (`div_(divider)`);
- clipping and AdamW as every engine here.
Each parameter's gradient is written into its unit's gradient buffer by the backward
itself (`materialize_params` makes the buffer the parameters' `.grad`): no copy.
The norms' own gather, reduce-scatter and copies (a few MB) are left out.
"""

from __future__ import annotations

from harness.models.unit_names import unit_names
from harness.plan.time.programs.common import (
    FP32,
    ModelCosts,
    Program,
    StepContext,
    clip_and_step,
)
from harness.plan.time.simulate import COMM, COMPUTE, SIDE, Op

TERM = "ya_fsdp_v1_grad_copy"


def ya_fsdp_v1_program(costs: ModelCosts, sizes: list[int], ctx: StepContext) -> list[Op]:
    """`sizes`: each unit's padded elements: embedding, blocks, head."""
    prog = Program(ctx)
    step = _V1Step(prog, costs, sizes)
    for _micro in range(ctx.grad_accum):
        step.forward()
        step.backward()
    step.end_of_backward()
    clip_and_step(prog, sum(sizes) // ctx.world_size)
    return prog.ops


class _V1Step:
    def __init__(self, prog: Program, costs: ModelCosts, sizes: list[int]) -> None:
        self.prog, self.ctx, self.costs, self.sizes = prog, prog.ctx, costs, sizes
        self.names = unit_names(len(sizes) - 2)
        self.gathered: dict[int, str] = {}  # unit -> its all-gather (weight buffer held)
        self.released: dict[int, str] = {}  # unit -> its compute's end (buffer released)
        self.grad_owner: dict[int, int] = {}  # gradient buffer (l % 2) -> its unit
        self.reduced: list[str] = []

    def all_gather(self, i: int) -> str:
        """`all_gather`: into weight buffer i % 2 once unit i-2 (forward) or i+2 (backward)
        has released it; issued from the comm stream."""
        if i in self.gathered:
            return self.gathered[i]
        for other in (i - 2, i + 2):
            if other in self.gathered and other in self.released:
                del self.gathered[other]
        waits = tuple(self.released.get(o) for o in (i - 2, i + 2) if o in self.released)
        name = self.names[i]
        gather = self.prog.collective("all_gather", self.sizes[i] * self.ctx.param_bytes, name,
                                      waits=(*waits, self.prog.last(SIDE)))  # fmt: skip
        self.prog.add(SIDE, 0.0, "event", label=f"synchronous.{gather}", waits=(gather,))
        self.gathered[i] = gather
        return gather

    def reduce_scatter(self, j: int) -> str:
        """`reduce_scatter_grad` of unit j on the comm stream: the copy of its bf16 gradient
        into the fp32 buffer, then the reduce-scatter into the master gradient."""
        ctx, name, size = self.ctx, self.names[j], self.sizes[j]
        waits: tuple = (self.released[j],)
        if ctx.on(TERM) and ctx.reduce_bytes != ctx.param_bytes:
            waits = (self.prog.memory((ctx.param_bytes + ctx.reduce_bytes) * size, TERM,
                                      f"grad_copy.{name}", stream=SIDE, unit=name,
                                      waits=waits),)  # fmt: skip
        rs = self.prog.collective("reduce_scatter", size * ctx.reduce_bytes, name, waits=waits)
        self.prog.add(SIDE, 0.0, "event", label=f"synchronous.{rs}", waits=(rs,))
        self.reduced.append(rs)
        return rs

    def forward(self) -> None:
        for i in range(len(self.sizes)):
            self.prog.hook("pre_forward", self.names[i])
            gather = self.all_gather(i)
            self.prog.compute(self.costs.forward[i], f"forward.{self.names[i]}", self.names[i],
                              waits=(gather,))  # fmt: skip
            self.released[i] = self.prog.marker(COMPUTE, f"released.{self.names[i]}")

    def backward(self) -> None:
        for i in reversed(range(len(self.sizes))):
            name = self.names[i]
            self.prog.hook("pre_backward", name)
            waits = []
            owner = self.grad_owner.get(i % 2)
            if owner is not None and owner != i:  # the buffer's owner is reduced first
                waits.append(self.reduce_scatter(owner))
            self.grad_owner[i % 2] = i
            waits.append(self.all_gather(i))
            self.prog.compute(self.costs.backward[i], f"backward.{name}", name,
                              waits=tuple(waits))  # fmt: skip
            self.released[i] = self.prog.marker(COMPUTE, f"released.{name}")

    def end_of_backward(self) -> None:
        """Every buffer freed (the last reduce-scatters), the compute stream waits for the
        comm stream, then one division of the sharded fp32 gradient."""
        for buffer in sorted(self.grad_owner, key=lambda b: -self.grad_owner[b]):
            self.reduce_scatter(self.grad_owner[buffer])
        self.grad_owner.clear()
        self.prog.add(COMPUTE, 0.0, "event", label="comm_wait",
                      waits=(self.prog.last(SIDE), self.prog.last(COMM)))  # fmt: skip
        if self.ctx.on(TERM):
            shard = sum(self.sizes) // self.ctx.world_size
            self.prog.memory(2 * FP32 * shard, TERM, "divide", unit="shards")
