"""FSDP2's program: what one step issues, in order (see `programs.py`).

FSDP2 (`fully_shard` per block, embedding alone, [norm, output] kept; torch 2.13
`_fsdp_param_group.py`, `_fsdp_collectives.py`):
- forward: a group's pre-forward issues its all-gather (implicitly prefetched: the host
  runs ahead), then copies the output into the parameters on the compute stream
  (`split_with_sizes_copy`); the next gather waits for the copy-out two groups back;
- backward: pre-backward copies out its own gather and prefetches the previous group;
  post-backward first waits for the previous reduce-scatter (one input buffer in flight),
  copies the gradients into the fp32 reduce-scatter input on the compute stream
  (`chunk_cat`), then reduce-scatters with NCCL's AVG (no division kernels); the
  embedding's reduce-scatter runs at the end of backward.
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


def fsdp2_program(costs: ModelCosts, sizes: list[int], ctx: StepContext) -> list[Op]:
    """`sizes`: each group's padded elements: embedding, blocks, [norm, output]."""
    prog = Program(ctx)
    step = _Fsdp2Step(prog, costs, sizes)
    for _micro in range(ctx.grad_accum):
        step.forward()
        step.backward()
    clip_and_step(prog, sum(sizes) // ctx.world_size)
    return prog.ops


class _Fsdp2Step:
    """The hooks of one FSDP2 step, issuing onto one program."""

    def __init__(self, prog: Program, costs: ModelCosts, sizes: list[int]) -> None:
        self.prog, self.ctx, self.costs, self.sizes = prog, prog.ctx, costs, sizes
        self.names = unit_names(len(sizes) - 2)
        self.copy_outs: list[str] = []  # in forward, a gather waits for the copy-out two back
        self.gathered: dict[int, str] = {}
        self.kept: set[int] = set()  # [norm, output]: not resharded after forward
        self.rs_in_flight: list[str] = []

    def unshard(self, i: int, forward: bool) -> None:
        if i in self.gathered or i in self.kept:
            return
        ctx, name = self.ctx, self.names[i]
        waits: tuple = ()
        if forward and len(self.copy_outs) >= 2:
            waits = (self.copy_outs[-2],)
        copy_in = self.prog.memory((FP32 + 3 * ctx.param_bytes) * self.sizes[i] // ctx.world_size,
                                   "fsdp2_copy_in_out", f"ag_copy_in.{name}", stream=SIDE,
                                   unit=name, waits=waits, kernels=2)  # fmt: skip
        self.gathered[i] = self.prog.collective("all_gather", self.sizes[i] * ctx.param_bytes,
                                                name, waits=(copy_in,))  # fmt: skip

    def copy_out(self, i: int) -> None:
        waits, name = (self.gathered.pop(i, None),), self.names[i]
        if self.ctx.on("fsdp2_copy_in_out"):
            done = self.prog.memory(2 * self.ctx.param_bytes * self.sizes[i],
                                    "fsdp2_copy_in_out", f"copy_out.{name}", unit=name,
                                    waits=waits)  # fmt: skip
        else:
            done = self.prog.add(COMPUTE, 0.0, "event", label=f"copy_out.{name}", waits=waits)
        self.copy_outs.append(done)

    def reduce(self, i: int) -> None:
        """`foreach_reduce` (torch 2.13 `_fsdp_collectives.py`): the gradients copied into
        the reduce-scatter input by `chunk_cat` on the compute stream, then the
        reduce-scatter stream (-1) waits for it; for fp32 and bf16 reduces
        `_get_gradient_divide_factors` gives NCCL's AVG, so no divide kernel runs."""
        prog, ctx, name, size = self.prog, self.ctx, self.names[i], self.sizes[i]
        while self.rs_in_flight:  # one reduce-scatter input buffer in flight
            prog.add(COMPUTE, 0.0, "event", label=f"rs_wait.{name}",
                     waits=(self.rs_in_flight.pop(0),))  # fmt: skip
        if ctx.on("fsdp2_copy_in_out"):
            prog.memory((ctx.param_bytes + ctx.reduce_bytes) * size, "fsdp2_copy_in_out",
                        f"rs_copy_in.{name}", unit=name)  # fmt: skip
        rs = prog.collective("reduce_scatter", size * ctx.reduce_bytes, name,
                             waits=(prog.marker(COMPUTE, f"rs_ready.{name}"),))  # fmt: skip
        prog.memory(3 * ctx.reduce_bytes * size // ctx.world_size, "fsdp2_copy_in_out",
                    f"accumulate.{name}", stream=SIDE, unit=name, waits=(rs,))  # fmt: skip
        self.rs_in_flight.append(rs)

    def forward(self) -> None:
        for i in range(len(self.sizes)):
            self.prog.hook("pre_forward", self.names[i])
            self.unshard(i, forward=True)
            if i not in self.kept:
                self.copy_out(i)
            last = self.copy_outs[-1] if self.copy_outs else None
            self.prog.compute(self.costs.forward[i], f"forward.{self.names[i]}", self.names[i],
                              waits=(last,))  # fmt: skip
        self.kept = {len(self.sizes) - 1}
        self.copy_outs.clear()

    def backward(self) -> None:
        prog, names = self.prog, self.names
        for i in reversed(range(len(self.sizes))):
            prog.hook("pre_backward", names[i])
            if i not in self.kept:
                self.unshard(i, forward=False)
                self.copy_out(i)
            if i - 1 >= 0:
                self.unshard(i - 1, forward=False)  # the default backward prefetch
            own = self.copy_outs[-1] if i not in self.kept and self.copy_outs else None
            prog.compute(self.costs.backward[i], f"backward.{names[i]}", names[i], waits=(own,))
            if i > 0:
                prog.hook("post_backward", names[i])
                self.reduce(i)
        self.kept = set()
        self.reduce(0)  # the embedding's, in the root's final callback
        prog.add(COMPUTE, 0.0, "event", label="wait_reduce",
                 waits=(prog.last(COMM), prog.last(SIDE)))  # fmt: skip
        self.rs_in_flight.clear()
