"""What each engine's step issues, in order: its program for the simulator (`simulate.py`).

A program interleaves the model's compute (per part: embedding, each block, the head and
loss; priced by `compute.py`) with what the engine adds: its collectives, on the one NCCL
stream of the process group, and its own memory-bound kernels, each on the stream the
engine puts it on, with the bytes it moves per element. The orders, streams and bytes are
read from each engine's code (torch 2.13) and checked against what the engines issue under
a fake process group (`tests/plan/test_plan_programs.py`):

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
- the flat gradient itself is a concatenation of the per-parameter gradients
  (use_orig_params=False), one copy on the compute stream.

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

local: the whole model on every rank, one fp32 all-reduce of all gradients.

yafsdp's program comes from its own schedule, run on the meta device (`yafsdp_program.py`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from harness.plan.simulate import COMM, COMPUTE, SIDE, Op

FP32 = 4
# Fused AdamW per sharded element: reads master, grad and both moments, writes master and
# both moments (fp32 each).
ADAMW_BYTES = 7 * FP32


@dataclass(frozen=True, slots=True)
class PartCost:
    """One part of the model in one phase: device seconds on the compute stream and the
    kernels the host launches for it."""

    seconds: float
    kernels: int


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
            )
        )
        return name

    def compute(self, part: PartCost, label: str, unit: str, waits: tuple = ()) -> str:
        host = part.kernels * self.ctx.launch_s if self.ctx.on("launch_overhead") else 0.0
        return self.add(COMPUTE, part.seconds, "compute", label=label, unit=unit,
                        waits=waits, host_s=host)  # fmt: skip

    def memory(
        self, nbytes: float, term: str, label: str, *, stream: str = COMPUTE, unit: str = "",
        waits: tuple = (), kernels: int = 1,
    ) -> str:  # fmt: skip
        host = kernels * self.ctx.launch_s if self.ctx.on("launch_overhead") else 0.0
        return self.add(stream, self.ctx.memory_s(nbytes), term, label=label, unit=unit,
                        waits=waits, host_s=host, nbytes=int(nbytes))  # fmt: skip

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


def part_names(n_blocks: int) -> list[str]:
    return ["embedding", *(f"block {i}" for i in range(n_blocks)), "output"]


def optimizer_step(prog: Program, shard_elements: int, unit: str = "shards") -> None:
    """Clipping's scale of the sharded gradients and the fused AdamW step, on the compute
    stream after the reductions."""
    prog.memory(2 * FP32 * shard_elements, "optimizer", "clip.scale", unit=unit)
    adamw_step(prog, shard_elements, unit)


def adamw_step(prog: Program, shard_elements: int, unit: str = "shards") -> None:
    prog.memory(ADAMW_BYTES * shard_elements, "optimizer", "adamw", unit=unit)


# ---- FSDP1 ------------------------------------------------------------------------------


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
    ctx = prog.ctx
    p, r, world = ctx.param_bytes, ctx.reduce_bytes, ctx.world_size
    names = part_names(len(sizes) - 2)
    n = len(sizes)
    gathered: dict[int, str] = {}  # part (or -1, the root) -> its all-gather

    def unshard(i: int, *, gather: bool = True) -> None:
        """`_unshard`: the rate limiter's check, then the gather (none for a unit still
        gathered, as the root is in backward)."""
        unit = "root" if i < 0 else names[i]
        if ctx.on("rate_limiter"):
            waits_host = (free_events.popleft(),) if len(free_events) >= 2 else ()
            label = f"limiter.{unit}" + (".waits" if waits_host else "")
            prog.add(COMPUTE, 0.0, "rate_limiter", label=label, unit=unit,
                     host_waits=waits_host)  # fmt: skip
        if not gather:
            return
        size = root if i < 0 else sizes[i]
        # pre-unshard: the fp32 shard cast to the param dtype (on its own stream)
        cast = prog.memory((FP32 + p) * size // world, "fsdp1_shard_cast",
                           f"shard_cast.{unit}", stream=SIDE, unit=unit)  # fmt: skip
        gathered[i] = prog.collective("all_gather", size * p, unit, waits=(cast,))

    def free(unit: str) -> None:
        free_events.append(prog.marker(COMPUTE, f"free.{unit}"))

    def reduce(i: int) -> None:
        unit, size = ("root", root) if i < 0 else (names[i], sizes[i])
        after = prog.marker(COMPUTE, f"grads_done.{unit}")
        waits: tuple = (after,)
        if ctx.on("fsdp1_grad_upcast"):  # post-backward stream: to fp32, then pre-divide
            up = prog.memory((p + r) * size, "fsdp1_grad_upcast", f"upcast.{unit}",
                             stream=SIDE, unit=unit, waits=(after,))  # fmt: skip
            pre = prog.memory(2 * r * size, "fsdp1_grad_upcast", f"predivide.{unit}",
                              stream=SIDE, unit=unit, waits=(up,))  # fmt: skip
            waits = (pre,)
        rs = prog.collective("reduce_scatter", size * r, unit, waits=waits)
        if ctx.on("fsdp1_grad_upcast"):  # post-divide and accumulation of the shard
            prog.memory(5 * r * size // world, "fsdp1_grad_upcast", f"postdivide.{unit}",
                        stream=SIDE, unit=unit, waits=(rs,), kernels=2)  # fmt: skip

    def post_backward(i: int) -> None:
        unit, size = ("root", root) if i < 0 else (names[i], sizes[i])
        if ctx.on("fsdp1_flat_grad"):  # per-parameter grads concatenated into the flat one
            prog.memory(2 * p * size, "fsdp1_flat_grad", f"flat_grad.{unit}", unit=unit)
        prog.hook("post_backward", unit)
        free(unit)
        reduce(i)

    for _micro in range(ctx.grad_accum):
        unshard(-1)  # root
        unshard(0)  # forward_prefetch from the root
        for i in range(n):
            prog.hook("pre_forward", names[i])
            if i not in gathered:
                unshard(i)
            if i + 1 < n:
                unshard(i + 1)
            prog.compute(costs.forward[i], f"forward.{names[i]}", names[i],
                         waits=(gathered.pop(i),))  # fmt: skip
            free(names[i])
        gathered.pop(-1, None)  # the root stays gathered until the end of backward
        pending: list[int] = []  # parts whose gradient hook has not fired yet
        for i in reversed(range(n)):
            prog.hook("pre_backward", names[i])
            if i not in gathered:
                unshard(i)
            if i - 1 >= 0:
                unshard(i - 1)  # BACKWARD_PRE
            if i == n - 1:
                unshard(-1, gather=False)  # the root's pre-backward
            prog.compute(costs.backward[i], f"backward.{names[i]}", names[i],
                         waits=(gathered.pop(i),))  # fmt: skip
            for j in pending:  # the previous part's hook fires after this part's kernels
                post_backward(j)
            pending = [i]
        for j in pending:
            post_backward(j)
        post_backward(-1)  # the root's (final norm): freed, then reduced last
        prog.add(COMPUTE, 0.0, "event", label="wait_post_backward",
                 waits=(prog.last(SIDE), prog.last(COMM)))  # fmt: skip
    shard = (sum(sizes) + root) // world
    clip_and_step(prog, shard)
    return free_events


def clip_and_step(prog: Program, shard: int) -> None:
    """The gradient norm of the shards (one read), its scalar all-reduce, then the scale
    and the optimizer step, which wait for it."""
    norm = prog.memory(FP32 * shard, "optimizer", "clip.norm", unit="shards")
    total = prog.collective("all_reduce", 8, "clip", waits=(norm,))
    prog.add(COMPUTE, 0.0, "event", label="clip.wait", waits=(total,))
    optimizer_step(prog, shard)


# ---- FSDP2 ------------------------------------------------------------------------------


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


# ---- local -------------------------------------------------------------------------------


def local_program(costs: ModelCosts, params: int, ctx: StepContext) -> list[Op]:
    """Unsharded: every part computes, then one fp32 all-reduce of every gradient."""
    prog = Program(ctx)
    names = part_names(len(costs.forward) - 2)
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
