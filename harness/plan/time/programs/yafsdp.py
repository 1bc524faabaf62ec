"""The yafsdp engine's program, from its own schedule run on the meta device.

The engine's `Schedule` decides, hook by hook, which collective to issue, into which
buffer, and when compute must wait. The planner drives that same object with its layout and
buffer plan laid out on the meta device (no memory) and a stand-in process group that
records each collective instead of running it: the hooks are called in the order autograd
calls them (the root's pre-forward, each unit's pre-forward, each unit's pre-backward from
the last, the end of backward, clipping). What the schedule issues becomes the program:
- each collective waits for the compute issued before it (on CUDA the engine launches it
  after an event recorded on the compute stream: the buffer's release);
- each wait the schedule makes on a collective (a unit's weights, a staging lane's
  reduce-scatter, the resident unit) is a wait of the compute stream;
- each tensor op the schedule runs (zeroing a gradient buffer, the copy into the staging,
  adding a reduced shard into the master gradient, dividing it, its norm, the once-per-step
  param-dtype copy of the master) is a kernel on the compute stream, with the bytes it
  reads and writes;
- between the hooks run the units' forward and backward, and after each unit's backward
  the copy of each weight's gradient into the gradient buffer (the engine's
  post-accumulate hook: one read and one write per element).
"""

from __future__ import annotations

import functools
from typing import Any

from harness.models.unit_names import unit_names
from harness.plan.time.programs.common import (
    ModelCosts,
    PartCost,
    Program,
    StepContext,
    adamw_step,
)
from harness.plan.time.simulate import COMPUTE, Op

TERM = "yafsdp_buffers"


class _Work:
    """A recorded collective: waiting on it is a wait of the compute stream."""

    def __init__(self, recorder: _Recorder, index: int) -> None:
        self.recorder, self.index = recorder, index

    def wait(self) -> None:
        self.recorder.events.append(("wait", self.index))


class _Recorder:
    """The stand-in process group: collectives become events of the skeleton."""

    def __init__(self, world_size: int) -> None:
        self.rank = 0
        self.world_size = world_size
        self.native_reduce_scatter = True
        self.events: list[tuple] = []
        self.collectives = 0

    def _issue(self, kind: str, nbytes: int) -> _Work:
        self.events.append(("collective", kind, nbytes))
        self.collectives += 1
        return _Work(self, self.collectives - 1)

    def all_gather(self, out: Any, shard: Any, async_op: bool) -> _Work:
        return self._issue("all_gather", out.numel() * out.element_size())

    def reduce_scatter(self, out: Any, full: Any, async_op: bool) -> tuple[_Work, Any]:
        work = self._issue("reduce_scatter", full.numel() * full.element_size())
        return work, out if out is not None else full.chunk(self.world_size)[0]

    def all_reduce_sum(self, t: Any, async_op: bool = False) -> _Work | None:
        work = self._issue("all_reduce", t.numel() * t.element_size())
        if async_op:
            return work
        work.wait()
        return None


def _engine_ops(recorder: _Recorder) -> Any:
    """A dispatch mode that records the schedule's tensor ops as kernels, with bytes."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from harness.plan.time.kernels import _record

    class EngineOps(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            out = func(*args, **(kwargs or {}))
            found = _record(str(func), func, args, kwargs, out)
            if found is not None and found[0] == "memory":
                recorder.events.append(("memory", found[1][0], str(func).split(".")[1]))
            return out

    return EngineOps()


@functools.lru_cache(maxsize=32)
def skeleton(
    model: str, world_size: int, dtype: str, reduce_dtype: str, grad_accum: int,
    buffer_plan: str = "auto", budget_bytes: int | None = None,
) -> tuple[tuple, ...]:  # fmt: skip
    """What the engine's schedule issues over one step, in order, as events: collectives
    (kind, bytes, then the unit the schedule's log names: its index, or `resident` or
    `clip`), waits on them, its own kernels
    (bytes), and where each unit's forward and backward run. Independent of the sequence
    length and of every price, so one drive serves every point of the same model and world."""
    import torch

    from harness.plan.memory.model import yafsdp_layout
    from yafsdp_impl import Schedule
    from yafsdp_impl.annotation_names import COLLECTIVES

    layout, buffers, _ = yafsdp_layout(
        model, world_size, dtype, reduce_dtype, True, buffer_plan, budget_bytes
    )
    recorder = _Recorder(world_size)
    events = recorder.events
    ends: list[Any] = []
    schedule = Schedule(
        layout,
        buffers,
        recorder,  # type: ignore[arg-type]
        grad_accum_steps=grad_accum,
        grad_views=[[] for _ in range(len(layout.units) + 1)],  # no weights: no views
        at_backward_end=ends.append,
    )
    with torch.no_grad(), _engine_ops(recorder):
        for _micro in range(grad_accum):
            schedule.on_root_forward()
            for i in range(len(layout.units)):
                events.append(("hook", "pre_forward", i))
                schedule.pre_forward(i)
                events.append(("forward", i))
                schedule.close_range()
            for i in reversed(range(len(layout.units))):
                events.append(("hook", "pre_backward", i))
                schedule.pre_backward(i)
                events.append(("backward", i))
                events.append(("accumulate", layout.units[i].padded_numel, i))
            ends.pop()()  # autograd's final callback: the end of backward
        events.append(("clip",))  # the engine's clipping: its kernels are the optimizer's
        schedule.clip_grad_norm_(1.0)
    # The log names a unit by the layout's path: kept as its index, which the program names
    # as every program does (a Hugging Face config's layout says 'model.layers.3').
    index = {u.name: u.index for u in layout.units}
    units = iter(index.get(unit, unit) for op, unit in schedule.log if op in COLLECTIVES)
    named = [(*e, next(units)) if e[0] == "collective" else e for e in events]
    if next(units, None) is not None:
        raise RuntimeError("the schedule's log names more collectives than it issued")
    shard = layout.master_numel + layout.resident.shard_numel
    return (*named, ("optimizer", shard))


def _plus(part: PartCost, seconds: float, kernels: int = 1) -> PartCost:
    """`part` with `kernels` more kernels taking `seconds` in all."""
    return PartCost(part.seconds + seconds, part.kernels + kernels,
                    part.times + ((seconds, 1.0),) * (1 if kernels else 0))  # fmt: skip


def _half(part: PartCost) -> PartCost:
    """Half of each kernel's work: a GEMM of half the vocabulary, half a table."""
    return PartCost(part.seconds / 2, part.kernels, tuple((s / 2, w) for s, w in part.times))


def vocab_split_costs(
    costs: ModelCosts, ctx: StepContext, *, tokens: int, dim: int, vocab: int
) -> ModelCosts:
    """The model's costs with the ends split into vocabulary halves (`split_vocab`), each
    half a part: both embedding halves look every token up (the high half also keeps, per
    token, the half holding its row: a `where` over the tokens' rows, and its backward two
    more), each backward fills half a table's gradient and scatters the tokens' rows once
    more; the output halves are GEMMs of half the vocabulary, the high one concatenating the
    two halves' logits (a read and a write of them) before the loss."""
    p = ctx.param_bytes
    rows_s, logits_s = ctx.memory_s(3 * tokens * dim * p), ctx.memory_s(2 * tokens * vocab * p)
    emb_f, emb_b = costs.forward[0], costs.backward[0]
    head_f, head_b = costs.forward[-1], costs.backward[-1]  # each with the loss
    forward = [emb_f, _plus(emb_f, rows_s), *costs.forward[1:-1],
               _half(head_f), _plus(_half(head_f), logits_s)]  # fmt: skip
    backward = [_half(emb_b), _plus(_half(emb_b), 3 * rows_s, 3), *costs.backward[1:-1],
                _half(head_b), _half(head_b)]  # fmt: skip
    return ModelCosts(forward, backward)


def yafsdp_program(
    costs: ModelCosts, model: str, dtype: str, reduce_dtype: str, ctx: StepContext,
    budget_bytes: int | None = None, buffer_plan: str = "auto",
) -> list[Op]:  # fmt: skip
    """`costs` are per unit: with a split plan, `vocab_split_costs`'s."""
    from yafsdp_impl import split_unit_names, splits_vocab

    events = skeleton(model, ctx.world_size, dtype, reduce_dtype, ctx.grad_accum, buffer_plan,
                      budget_bytes)  # fmt: skip
    prog = Program(ctx)
    split = splits_vocab(buffer_plan)
    names = unit_names(len(costs.forward) - 2 - 2 * split)
    names = split_unit_names(names) if split else names
    collectives: list[str] = []
    waiting: list[str] = []  # collectives the compute stream must wait for next

    def waits() -> tuple[str, ...]:
        found = tuple(dict.fromkeys(waiting))
        waiting.clear()
        return found

    def flush() -> None:
        if waiting:
            prog.add(COMPUTE, 0.0, "event", label="wait", waits=waits())

    buffers_on = ctx.on(TERM)
    clipping = False
    for event in events:
        kind = event[0]
        if kind == "collective":
            _, what, nbytes, unit = event
            unit = names[unit] if isinstance(unit, int) else unit
            collectives.append(prog.collective(what, nbytes, unit, waits=(prog.last(COMPUTE),)))
        elif kind == "wait":
            waiting.append(collectives[event[1]])
        elif kind == "memory":
            flush()
            if clipping:
                prog.memory(event[1], "optimizer", f"clip.{event[2]}", unit="shards")
            elif buffers_on:
                prog.memory(event[1], TERM, event[2], unit="engine")
        elif kind == "clip":
            clipping = True
        elif kind == "hook":
            prog.hook(event[1], names[event[2]])
        elif kind in ("forward", "backward"):
            i = event[1]
            part = (costs.forward if kind == "forward" else costs.backward)[i]
            prog.compute(part, f"{kind}.{names[i]}", names[i], waits=waits())
        elif kind == "accumulate":  # each weight's gradient copied into the buffer
            if buffers_on:
                prog.memory(2 * ctx.param_bytes * event[1], TERM, "grad_copy",
                            unit=names[event[2]])  # fmt: skip
        elif kind == "optimizer":
            flush()
            adamw_step(prog, event[1])
    return prog.ops
