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

from harness.plan.programs import FP32, ModelCosts, Program, StepContext, clip_and_step, part_names
from harness.plan.simulate import COMM, COMPUTE, SIDE, Op


def fsdp2_program(costs: ModelCosts, sizes: list[int], ctx: StepContext) -> list[Op]:
    """`sizes`: each group's padded elements: embedding, blocks, [norm, output]."""
    prog = Program(ctx)
    p, r, world = ctx.param_bytes, ctx.reduce_bytes, ctx.world_size
    names = part_names(len(sizes) - 2)
    n = len(sizes)
    copy_outs: list[str] = []  # in forward, a gather waits for the copy-out two groups back
    gathered: dict[int, str] = {}
    kept: set[int] = set()  # [norm, output]: not resharded after forward
    rs_in_flight: list[str] = []

    def unshard(i: int, forward: bool) -> None:
        if i in gathered or i in kept:
            return
        waits: tuple = ()
        if forward and len(copy_outs) >= 2:
            waits = (copy_outs[-2],)
        copy_in = prog.memory((FP32 + 3 * p) * sizes[i] // world, "fsdp2_copy_in_out",
                              f"ag_copy_in.{names[i]}", stream=SIDE, unit=names[i],
                              waits=waits, kernels=2)  # fmt: skip
        gathered[i] = prog.collective("all_gather", sizes[i] * p, names[i], waits=(copy_in,))

    def copy_out(i: int) -> None:
        waits = (gathered.pop(i, None),)
        if ctx.on("fsdp2_copy_in_out"):
            copy_outs.append(prog.memory(2 * p * sizes[i], "fsdp2_copy_in_out",
                                         f"copy_out.{names[i]}", unit=names[i],
                                         waits=waits))  # fmt: skip
        else:
            copy_outs.append(prog.add(COMPUTE, 0.0, "event", label=f"copy_out.{names[i]}",
                                      waits=waits))  # fmt: skip

    def reduce(i: int) -> None:
        while rs_in_flight:  # one reduce-scatter input buffer in flight
            prog.add(COMPUTE, 0.0, "event", label=f"rs_wait.{names[i]}",
                     waits=(rs_in_flight.pop(0),))  # fmt: skip
        if ctx.on("fsdp2_copy_in_out"):
            prog.memory((p + r) * sizes[i], "fsdp2_copy_in_out", f"rs_copy_in.{names[i]}",
                        unit=names[i])  # fmt: skip
        rs = prog.collective("reduce_scatter", sizes[i] * r, names[i],
                             waits=(prog.marker(COMPUTE, f"rs_ready.{names[i]}"),))  # fmt: skip
        prog.memory(3 * r * sizes[i] // world, "fsdp2_copy_in_out", f"accumulate.{names[i]}",
                    stream=SIDE, unit=names[i], waits=(rs,))  # fmt: skip
        rs_in_flight.append(rs)

    for _micro in range(ctx.grad_accum):
        for i in range(n):
            prog.hook("pre_forward", names[i])
            unshard(i, forward=True)
            if i not in kept:
                copy_out(i)
            prog.compute(costs.forward[i], f"forward.{names[i]}", names[i],
                         waits=(copy_outs[-1] if copy_outs else None,))  # fmt: skip
        kept = {n - 1}
        copy_outs.clear()
        for i in reversed(range(n)):
            prog.hook("pre_backward", names[i])
            if i not in kept:
                unshard(i, forward=False)
                copy_out(i)
            if i - 1 >= 0:
                unshard(i - 1, forward=False)  # the default backward prefetch
            own = copy_outs[-1] if i not in kept and copy_outs else None
            prog.compute(costs.backward[i], f"backward.{names[i]}", names[i], waits=(own,))
            if i > 0:
                prog.hook("post_backward", names[i])
                reduce(i)
        kept = set()
        reduce(0)  # the embedding's, in the root's final callback
        prog.add(COMPUTE, 0.0, "event", label="wait_reduce", waits=(prog.last(COMM),
                 prog.last(SIDE)))  # fmt: skip
        rs_in_flight.clear()
    shard = sum(sizes) // world
    clip_and_step(prog, shard)
    return prog.ops
