"""FSDP1's program: what one step issues, in order (see `programs.py`).

FSDP1 (FULL_SHARD, BACKWARD_PRE, forward_prefetch, limit_all_gathers, use_orig_params=False,
bf16 params, fp32 reduce; `torch/distributed/fsdp/_runtime_utils.py`):
- units: the root (final norm, gathered once and kept), embedding, blocks, output;
- forward: a unit's pre-forward gathers it (if not prefetched) and prefetches the next;
  its post-forward frees it, recording a free event on the compute stream;
- every gather first passes the rate limiter: with two free events queued, the host waits
  for the oldest (`_FreeEventQueue`, `event.synchronize()`);
- backward: a unit's pre-backward prefetches the one before it (BACKWARD_PRE); its
  gradient hook fires after the next unit's backward kernels are issued (the flat
  parameter's views were made when it was prefetched, so autograd reaches them later);
  there the post-backward stream waits for the compute stream, upcasts the flat gradient to
  fp32 and pre-divides it, the reduce-scatter follows, then the post-divide;
- the flat gradient is a concatenation of the per-parameter gradients (use_orig_params=False):
  the backward of the `torch.split` that made the parameters' views. Autograd runs a backward
  op on the stream its forward ran on (docs/source/notes/cuda.rst, "Stream semantics of
  backward passes"; the stream is recorded when the node is made, torch/csrc/autograd/
  input_metadata.cpp), and the views are made under the unshard stream (`_unshard`: `with
  state._device_handle.stream(unshard_stream): handle.unshard()` -> `_use_unsharded_flat_param`
  -> `_use_unsharded_views(as_params=False)` -> `_get_unflat_views_unaligned`: `torch.split`).
  So the cat runs on the unshard stream, in its FIFO behind the all-gather issued last there
  (a prefetch included); the next pre-backward makes the compute stream wait for the unshard
  stream before it prefetches (`_pre_backward_hook`: `current_stream().wait_stream(
  state._unshard_stream)`), and the post-backward stream waits for the current stream, which
  autograd made wait for the cat (`_post_backward_hook`). Lines at torch 2.13:
  `_runtime_utils.py` 277-307 (`_unshard`), 685 and 689-693 (the wait, then the prefetch),
  751 (the post-backward wait); `_flat_param.py` 1359 (`unshard`), 1492-1521, 1901 (the
  split). At torch 2.1.0 the same calls: `_runtime_utils.py` 319-347 (`_unshard`), 706 then
  714 (the wait, then the prefetch), 769 (the post-backward wait); `flat_param.py` 1230,
  1346-1376, 1747; so from 2.1 to 2.13.
  The switch `fsdp1_cat_on_unshard` puts it there; off, it runs on the compute stream.
"""

from __future__ import annotations

from collections import deque

from harness.models.unit_names import unit_names
from harness.plan.time.programs.common import (
    FP32,
    ModelCosts,
    Program,
    StepContext,
    clip_and_step,
    split_launches,
)
from harness.plan.time.simulate import COMM, COMPUTE, SIDE, UNSHARD, Op


def fsdp1_program(costs: ModelCosts, sizes: list[int], root: int, ctx: StepContext) -> list[Op]:
    """`sizes`: each part's flat parameter (padded), `root`: the root's (the final norm).

    The rate limiter's queue carries over from one step to the next: the program starts
    with as many (long completed) free events queued as a steady-state step leaves."""
    leftover = 0
    for _ in range(8):  # the queue's length settles within a few steps
        after = len(_fsdp1_step(Program(ctx), costs, sizes, root, deque([None] * leftover)))
        if after == leftover:
            break
        leftover = after
    prog = Program(ctx)
    _fsdp1_step(prog, costs, sizes, root, deque([None] * leftover))
    return prog.ops


def _fsdp1_step(
    prog: Program, costs: ModelCosts, sizes: list[int], root: int,
    free_events: deque[str | None],
) -> deque[str | None]:  # fmt: skip
    """One step of FSDP1 onto `prog`; returns the rate limiter's queue as the step leaves
    it (`free_events`: the free events recorded and not yet waited for)."""
    step = _Fsdp1Step(prog, costs, sizes, root, free_events)
    for _micro in range(prog.ctx.grad_accum):
        step.forward()
        step.backward()
    clip_and_step(prog, (sum(sizes) + root) // prog.ctx.world_size)
    return free_events


class _Fsdp1Step:
    """The hooks of one FSDP1 step, issuing onto one program."""

    def __init__(
        self, prog: Program, costs: ModelCosts, sizes: list[int], root: int,
        free_events: deque[str | None],
    ) -> None:  # fmt: skip
        self.prog, self.ctx, self.costs = prog, prog.ctx, costs
        self.sizes, self.root, self.free_events = sizes, root, free_events
        self.names = unit_names(len(sizes) - 2)
        self.gathered: dict[int, str] = {}  # part (or -1, the root) -> its all-gather
        self.grads_ready: dict[int, str] = {}  # part -> the end of its backward kernels
        self.cat_on_unshard = self.ctx.on("fsdp1_cat_on_unshard")

    def _unit(self, i: int) -> tuple[str, int]:
        return ("root", self.root) if i < 0 else (self.names[i], self.sizes[i])

    def unshard(self, i: int, *, gather: bool = True) -> None:
        """`_unshard`: the rate limiter's check, then the gather (none for a unit still
        gathered, as the root is in backward)."""
        prog, ctx = self.prog, self.ctx
        unit, size = self._unit(i)
        if ctx.on("rate_limiter"):
            queue = self.free_events
            waits_host = (queue.popleft(),) if len(queue) >= 2 else ()
            label = f"limiter.{unit}" + (".waits" if waits_host else "")
            prog.add(COMPUTE, 0.0, "rate_limiter", label=label, unit=unit,
                     host_waits=waits_host)  # fmt: skip
        if not gather:
            return
        # pre-unshard: the fp32 shard cast to the param dtype (on its own stream)
        cast = prog.memory((FP32 + ctx.param_bytes) * size // ctx.world_size,
                           "fsdp1_shard_cast", f"shard_cast.{unit}", stream=SIDE,
                           unit=unit)  # fmt: skip
        done = prog.collective("all_gather", size * ctx.param_bytes, unit, waits=(cast,))
        if self.cat_on_unshard:  # a synchronous all-gather: the unshard stream waits for it
            done = prog.add(UNSHARD, 0.0, "event", label=f"gathered.{unit}", waits=(done,))
        self.gathered[i] = done

    def free(self, unit: str) -> None:
        self.free_events.append(self.prog.marker(COMPUTE, f"free.{unit}"))

    def reduce(self, i: int, cat: str | None) -> None:
        """The chain between a unit's last backward kernel and its reduce-scatter, all at
        the compute stream's priority (`streams.py`): on the post-backward stream, the
        cast to the reduce dtype when it differs (`_post_backward_hook`:
        `flat_param.grad.to(handle._reduce_dtype)`), then the pre-divide (`_reduce_grad`:
        `_div_if_needed(padded_unsharded_grad, _gradient_predivide_factor)`), each launched
        in pieces past 2**31 bytes, after the cat `cat` of the flat gradient (when it runs
        on a stream of its own); the reduce-scatter; then the shard's post-divide and its
        accumulation."""
        prog, ctx = self.prog, self.ctx
        p, r, world = ctx.param_bytes, ctx.reduce_bytes, ctx.world_size
        unit, size = self._unit(i)
        waits: tuple = (prog.marker(COMPUTE, f"grads_done.{unit}"), cat)
        launches = split_launches(r * size, ctx.split_bytes)
        if ctx.on("fsdp1_grad_upcast"):
            if r != p:
                waits = (prog.memory((p + r) * size, "fsdp1_grad_upcast", f"upcast.{unit}",
                                     stream=SIDE, unit=unit, waits=waits,
                                     launches=launches),)  # fmt: skip
            if predivide_factor(world) > 1:
                waits = (prog.memory(2 * r * size, "fsdp1_grad_upcast", f"predivide.{unit}",
                                     stream=SIDE, unit=unit, waits=waits,
                                     launches=launches),)  # fmt: skip
        rs = prog.collective("reduce_scatter", size * r, unit, waits=waits)
        if ctx.on("fsdp1_grad_upcast"):  # post-divide and accumulation of the shard
            prog.memory(5 * r * size // world, "fsdp1_grad_upcast", f"postdivide.{unit}",
                        stream=SIDE, unit=unit, waits=(rs,), kernels=2)  # fmt: skip

    def post_backward(self, i: int) -> None:
        unit, size = self._unit(i)
        cat = None
        if self.ctx.on("fsdp1_flat_grad"):  # per-parameter grads concatenated into the flat one
            nbytes = 2 * self.ctx.param_bytes * size
            if self.cat_on_unshard and i in self.grads_ready:
                cat = self.prog.memory(nbytes, "fsdp1_flat_grad", f"flat_grad.{unit}",
                                       stream=UNSHARD, unit=unit,
                                       waits=(self.grads_ready.pop(i),))  # fmt: skip
            else:
                self.prog.memory(nbytes, "fsdp1_flat_grad", f"flat_grad.{unit}", unit=unit)
        self.prog.hook("post_backward", unit)
        self.free(unit)
        self.reduce(i, cat)

    def forward(self) -> None:
        names, n = self.names, len(self.sizes)
        self.unshard(-1)  # root
        self.unshard(0)  # forward_prefetch from the root
        for i in range(n):
            self.prog.hook("pre_forward", names[i])
            if i not in self.gathered:
                self.unshard(i)
            if i + 1 < n:
                self.unshard(i + 1)
            self.prog.compute(self.costs.forward[i], f"forward.{names[i]}", names[i],
                              waits=(self.gathered.pop(i),))  # fmt: skip
            self.free(names[i])
        self.gathered.pop(-1, None)  # the root stays gathered until the end of backward

    def backward(self) -> None:
        names, n, prog = self.names, len(self.sizes), self.prog
        pending: list[int] = []  # parts whose gradient hook has not fired yet
        for i in reversed(range(n)):
            prog.hook("pre_backward", names[i])
            if i not in self.gathered:
                self.unshard(i)
            if self.cat_on_unshard:  # the compute stream waits for the unshard stream
                prog.add(COMPUTE, 0.0, "event", label=f"wait_unshard.{names[i]}",
                         unit=names[i], waits=(prog.last(UNSHARD),))  # fmt: skip
            if i - 1 >= 0:
                self.unshard(i - 1)  # BACKWARD_PRE
            if i == n - 1:
                self.unshard(-1, gather=False)  # the root's pre-backward
            prog.compute(self.costs.backward[i], f"backward.{names[i]}", names[i],
                         waits=(self.gathered.pop(i),))  # fmt: skip
            if self.cat_on_unshard:  # autograd's event for the gradients' consumer (the cat)
                self.grads_ready[i] = prog.marker(COMPUTE, f"grads_ready.{names[i]}")
            for j in pending:  # the previous part's hook fires after this part's kernels
                self.post_backward(j)
            pending = [i]
        for j in pending:
            self.post_backward(j)
        self.post_backward(-1)  # the root's (final norm): freed, then reduced last
        prog.add(COMPUTE, 0.0, "event", label="wait_post_backward",
                 waits=(prog.last(SIDE), prog.last(COMM)))  # fmt: skip


def predivide_factor(world_size: int) -> int:
    """FSDP1's `_get_gradient_predivide_factor`: the power of two near the world's square
    root that gradients are divided by before their reduce-scatter (1: no pre-divide)."""
    factor = 1
    while world_size % factor == 0 and world_size / factor > factor:
        factor *= 2
    return factor
