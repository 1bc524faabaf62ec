"""The schedule: which collective runs when, and what each weight buffer holds.

Forward: the root pre-hook opens the step (param-dtype copy of the master, resident
gather) and gathers unit 0; each unit's pre-hook gathers the next unit into the other
buffer, then waits for its own weights. Backward mirrors it: each unit gathers the one
before it, and a unit's gradient buffer is reduce-scattered lazily, when the next unit
that uses that buffer starts its backward. The end of backward flushes the rest in an
order every rank shares and reduces the resident unit once per step. On the step's last
micro-batch each finished reduce-scatter divides its slice of the master gradient (the one
division) and adds its squared norm to the clipping total.

Lent weight buffers: once backward has passed a unit, its weight buffer is free until the
next gather into it (on the step's last micro-batch every unit is gathered afresh; on the
others units 0 and 1 are kept), so it is lent to the reduce-scatters as staging lanes, each
as large as the staging buffer. While any is lent, a waiting unit's reduce-scatter goes out
as soon as free lanes hold all its pieces, and a piece finding no free lane waits for the
oldest one in flight. So the last units' reduce-scatters overlap each other and unit 0's
backward instead of queueing on the one staging buffer, and with `ends_shared` the output
unit's goes out while the layers' backward runs (its buffer is free until unit 0 is
gathered). What is lent and issued when depends on the layout alone: every rank's order
of collectives stays the same.

The staging lanes, their lending and the reduce-scatters are `_reduce_scatter.py`'s; the
gradients' norm and clipping are `_clipping.py`'s; the profiler ranges' names are
`annotation_names.py`'s.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.autograd import Variable
from torch.autograd.profiler import record_function

from yafsdp_impl import annotation_names as names
from yafsdp_impl._buffers import Buffers
from yafsdp_impl._clipping import Clipping
from yafsdp_impl._collectives import Comm
from yafsdp_impl._events import DONE, Event, Streams
from yafsdp_impl._layout import Layout
from yafsdp_impl._reduce_scatter import BufferSlot, ReduceScatters

# The units whose gathers open a step, with the resident unit's: unit 0, and unit 1, which
# unit 0's forward gathers anyway before it computes.
FIRST_GATHERS = 2


class Phase(enum.Enum):
    IDLE = enum.auto()  # no step open: the next forward copies the master and gathers afresh
    FORWARD = enum.auto()  # a step is open: its forwards, and the gaps between micro-batches
    BACKWARD = enum.auto()  # autograd is running the units' backward


def after_backward(callback: Callable[[], None]) -> None:
    """Run `callback` once autograd has finished the backward pass now running."""
    Variable._execution_engine.queue_callback(callback)


class Schedule(ReduceScatters, Clipping):
    """The engine's decisions, hook by hook. `comm` carries the collectives; `at_backward_end`
    arranges for `end_backward` to run after the last unit's backward (autograd's final
    callback by default; a planner driving the hooks itself calls `end_backward`)."""

    def __init__(
        self,
        layout: Layout,
        buffers: Buffers,
        comm: Comm,
        *,
        grad_accum_steps: int,
        grad_views: list[list[tuple[nn.Parameter, torch.Tensor]]],
        at_backward_end: Callable[[Callable[[], None]], None] = after_backward,
    ) -> None:
        self.layout = layout
        self.buffers = buffers
        self.comm = comm
        self.rank = comm.rank
        self.world_size = comm.world_size
        self.at_backward_end = at_backward_end
        self.grad_accum_steps = grad_accum_steps
        self.streams = Streams(buffers.device)
        self.grad_views = grad_views
        self.log: list[tuple[str, str]] = []  # (op, unit), in issue order
        self.phase = Phase.IDLE
        self.version = 0  # bumped whenever the master weights may have changed (a new step)
        self.slots = [BufferSlot() for _ in buffers.weight]
        self.resident_ready: Event = DONE
        self._init_lanes()
        self.grads_waiting: set[int] = set()  # units whose gradients sit in a grad buffer
        self.micro = 0
        self._init_clipping(len(layout.units))
        self._range: Any = None  # the open record_function of the current unit

    def invalidate(self) -> None:
        """The master weights are about to change outside a step: wait for the collectives
        in flight (the gathers `prefetch_next_step` started read the master or its param-
        dtype copy, which the next step's copy overwrites), and gather afresh next forward."""
        self.wait_in_flight()
        self.phase = Phase.IDLE

    # ---- forward ----------------------------------------------------------------------

    def on_root_forward(self) -> None:
        if self.phase is Phase.IDLE:
            self._open_step()
        self._attach_grads()  # an optimizer's zero_grad may have dropped them since
        self._gather(0)
        # Resident weights may be used anywhere in the forward, even before the first unit.
        with record_function(names.wait("all_gather", self.layout.resident.name)):
            self.resident_ready.wait()
        self.resident_ready = DONE

    def pre_forward(self, i: int) -> None:
        if i + 1 < len(self.layout.units):
            self._gather(i + 1)
        self._wait_weights(i)
        unit = self.layout.units[i].name
        self.log.append(("forward", unit))
        self._open_range(names.forward(unit))

    def close_range(self) -> None:
        if self._range is not None:
            self._range.__exit__(None, None, None)
            self._range = None

    # ---- backward ---------------------------------------------------------------------

    def pre_backward(self, i: int) -> None:
        if self.phase is not Phase.BACKWARD:
            self.phase = Phase.BACKWARD
            self.at_backward_end(self.end_backward)
        self.close_range()
        unit = self.layout.units[i].name
        self.log.append(("backward", unit))
        if i > 0:
            self._gather(i - 1)
        k = self.buffers.buffer_of[i]
        self._lend_weight_buffers(done_from=i + 1)
        previous = [u for u in self.grads_waiting if self.buffers.buffer_of[u] == k]
        for u in previous:
            self._reduce_scatter(u)  # lazy: its gradient buffer is needed now
        self._reduce_scatter_finished_units(i)  # buffers no later backward needs: at once
        self._reduce_scatter_while_lanes_free()  # early, where lent buffers make room
        self._wait_weights(i)
        self._detach_grads(i)  # the first gradient of each weight is copied in, not added
        self.grads_waiting.add(i)
        self._open_range(names.backward(unit))

    def end_backward(self) -> None:
        self.close_range()
        self.log.append(("end_backward", "all"))
        b = self.buffers
        self._lend_weight_buffers(done_from=0)
        for i in sorted(self.grads_waiting, reverse=True):
            self._reduce_scatter(i)
        b.resident_staging.add_(b.resident_grad)
        b.resident_grad.zero_()
        last = self._last_micro
        if last:
            res = self.layout.resident
            self.resident_reduce_scatter = self._launch_reduce_scatter(
                res.name, b.resident_reduced, b.resident_staging, b.resident_master_grad, -1
            )
        self._finish_reduce_scatters()
        self.lanes = [self.staging_lane]  # the lent weight buffers are drained: return them
        if last:
            b.resident_staging.zero_()
            self.micro = 0
            self.phase = Phase.IDLE
            self.grad_norms_valid = True
            self._launch_norm_all_reduce()
        else:
            self.micro += 1
            self.phase = Phase.FORWARD

    # ---- the step's start ---------------------------------------------------------------

    def prefetch_next_step(self) -> None:
        """Open the next step now (the optimizer has just written the master weights): the
        param-dtype copy, then the resident unit's and the first two units' gathers, which
        then overlap whatever runs before the next forward."""
        if self.phase is not Phase.IDLE:
            return  # mid-step (an accumulation): the master weights have not changed
        self._open_step()

    def wait_in_flight(self) -> None:
        """Wait for every collective still in flight (on CPU the gloo threads may still be
        moving a prefetched gather): afterwards no issued work is outstanding."""
        with record_function(names.wait_in_flight()):
            for slot in self.slots:
                slot.ready.wait()
                slot.ready = DONE
            self.resident_ready.wait()
            self.resident_ready = DONE
            self._finish_reduce_scatters()
            self.norm_reduced.wait()
            self.norm_reduced = DONE

    def _open_step(self) -> None:
        """A new step: the resident unit's and the first units' shards are copied to the
        param dtype and their gathers issued at once (each waits for its copy, never less),
        then the other shards are copied while those gathers run."""
        b = self.buffers
        self._drop_norm_all_reduce()  # a step not clipped: its norm is not needed
        self.version += 1
        self.phase = Phase.FORWARD
        self.copy_master_to_param_dtype("first")  # on CUDA before the events below
        out, shard = b.resident_weight, b.resident_gather_source
        name = self.layout.resident.name
        with record_function(names.collective("all_gather", name)):
            self.resident_ready = self.streams.launch(
                lambda a: self.comm.all_gather(out, shard, a),
                self.streams.compute_event(),
            )
        self.log.append(("all_gather", name))
        for i in range(min(FIRST_GATHERS, len(self.layout.units))):
            self._gather(i)
        self.copy_master_to_param_dtype("rest")  # later gathers are issued after this
        b.master_grad.zero_()
        b.resident_master_grad.zero_()
        self.grad_sq_norms.zero_()
        self.grad_norms_valid = False
        self._attach_grads()

    def _attach_grads(self) -> None:
        self.buffers.attach_master_grads()
        for views in self.grad_views:
            for p, g in views:
                if p.grad is not g:
                    p.grad = g

    # ---- a unit's gradients -------------------------------------------------------------
    # A unit's `.grad` views are taken off as its backward starts: autograd then hands each
    # weight's first gradient to `gradient_arrived`, which copies it into the unit's slice
    # of the gradient buffer and puts the view back, so a second gradient of the same weight
    # is added into it. The buffer is never zeroed and added to (two passes over it more):
    # only the slices no gradient reached, and the padding, are zeroed before the buffer is
    # read (`_complete_grads`).

    def _detach_grads(self, i: int) -> None:
        for p, _g in self.grad_views[i]:
            p.grad = None

    def gradient_arrived(self, param: nn.Parameter, view: torch.Tensor) -> None:
        """Autograd's post-accumulate hook of a unit's weight."""
        grad = param.grad
        if grad is not None and grad is not view:  # its first gradient this backward
            view.copy_(grad)
            param.grad = view

    def _complete_grads(self, i: int) -> None:
        """Zero what no gradient reached in unit i's buffer slice (unused weights, padding)
        and put every view back."""
        unit = self.layout.units[i]
        for p, g in self.grad_views[i]:
            if p.grad is not g:
                g.zero_()
                p.grad = g
        if unit.padded_numel > unit.numel:
            self.buffers.grad[self.buffers.buffer_of[i]][unit.numel : unit.padded_numel].zero_()

    @torch.no_grad()
    def copy_master_to_param_dtype(self, part: str = "all") -> None:
        """The once-per-step param-dtype copy of the master shards that the gathers read:
        `part` "first" (the resident unit's and the first units', which the step's first
        gathers read), "rest" (every other unit's) or "all"."""
        for dst, src in self.param_copy_slices(part):
            dst.copy_(src)

    def param_copy_slices(self, part: str = "all") -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(param-dtype copy, master) pairs of `part` (see `copy_master_to_param_dtype`);
        none where the param dtype is fp32 (the gathers read the master itself)."""
        b = self.buffers
        if b.gather_source is b.master:
            return []
        first = min(FIRST_GATHERS, len(self.layout.units))
        units = self.layout.units
        head = units[first - 1].master_offset + units[first - 1].shard_numel if first else 0
        pairs = {
            "first": [(b.resident_gather_source, b.resident_master),
                      (b.gather_source[:head], b.master[:head])],
            "rest": [(b.gather_source[head:], b.master[head:])],
        }  # fmt: skip
        return pairs["first"] + pairs["rest"] if part == "all" else pairs[part]

    # ---- weights ----------------------------------------------------------------------

    def _gather(self, i: int) -> None:
        k = self.buffers.buffer_of[i]
        slot = self.slots[k]
        if slot.holds(i, self.version):
            return  # still holds this unit's current weights: no re-gather
        self._take_back(k)
        # A gather still in flight into this buffer (prefetched, then the weights reloaded)
        # must land before the next one: gloo may run two collectives concurrently.
        slot.ready.wait()
        unit = self.layout.units[i]
        out = self.buffers.weight[k][: unit.padded_numel]
        shard = self.buffers.gather_source[self.buffers.master_shard(unit)]
        # The compute event is buffer k's *released* point: its previous unit is done.
        released = self.streams.compute_event()
        with record_function(names.collective("all_gather", unit.name)):
            slot.ready = self.streams.launch(
                lambda a: self.comm.all_gather(out, shard, a), released
            )
        slot.owner, slot.version = i, self.version
        self.log.append(("all_gather", unit.name))

    def _wait_weights(self, i: int) -> None:
        k = self.buffers.buffer_of[i]
        slot = self.slots[k]
        if not slot.holds(i, self.version):
            raise RuntimeError(
                f"unit {i} runs but weight buffer {k} holds unit {slot.owner}: units must "
                "run in the order given to YaFSDP, each once per forward"
            )
        with record_function(names.wait("all_gather", self.layout.units[i].name)):
            slot.ready.wait()
        slot.ready = DONE

    # ---- profiler ranges --------------------------------------------------------------

    def _open_range(self, name: str) -> None:
        self.close_range()
        self._range = record_function(name)
        self._range.__enter__()
