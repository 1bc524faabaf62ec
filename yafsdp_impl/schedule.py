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
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.autograd import Variable
from torch.autograd.profiler import record_function

from yafsdp_impl.buffers import Buffers
from yafsdp_impl.collectives import Comm
from yafsdp_impl.events import DONE, Event, Streams
from yafsdp_impl.layout import Layout

# Units 0 and 1 stay gathered from one micro-batch's backward into the next one's forward.
KEPT_GATHERED = 2
# The units whose gathers open a step, with the resident unit's: unit 0, and unit 1, which
# unit 0's forward gathers anyway before it computes.
FIRST_GATHERS = 2


def add_squared_norm(acc: torch.Tensor, grad: torch.Tensor) -> None:
    """acc (fp64) += the squared L2 norm of `grad`, without a gradient-sized temporary on GPU.

    On CUDA the fp32 norm is reduced by many partial sums and a tree into one scalar; an
    fp64 norm would first copy the slice to fp64. torch's CPU fp32 norm sums far less
    exactly (1e-4 off at 3M normal samples, 3e-3 at 30M, against an fp64 sum), so on CPU
    the norm is taken in fp64, copy and all.
    """
    if grad.is_cuda:
        norm = torch.linalg.vector_norm(grad)
        acc.addcmul_(norm, norm)
    else:
        acc.add_(torch.linalg.vector_norm(grad, dtype=torch.float64).square())


class Phase(enum.Enum):
    IDLE = enum.auto()  # no step open: the next forward copies the master and gathers afresh
    FORWARD = enum.auto()  # a step is open: its forwards, and the gaps between micro-batches
    BACKWARD = enum.auto()  # autograd is running the units' backward


@dataclass(slots=True)
class BufferSlot:
    """What one unsharded weight buffer holds: whose weights, of which step, ready when."""

    owner: int | None = None
    version: int = -1
    ready: Event = DONE

    def holds(self, unit: int, version: int) -> bool:
        return self.owner == unit and self.version == version


@dataclass(slots=True)
class ReduceScatterInFlight:
    """A launched reduce-scatter: when done, `reduced` is this rank's summed chunk, to be
    added into `master_grad`; on the step's last micro-batch that slice is then final, so it
    is divided there and its squared norm added to `sq_norm` (clipping reads no gradient)."""

    name: str
    done: Event
    reduced: torch.Tensor
    master_grad: torch.Tensor
    sq_norm: torch.Tensor
    last_micro: bool


@dataclass(slots=True)
class StagingLane:
    """Reduce-dtype room for one reduce-scatter piece: its input (`full`, P x chunk) and,
    for a native reduce-scatter, its output (`out`, chunk). `weight_buffer`: the weight
    buffer it is carved from, or None for the staging buffer itself."""

    full: torch.Tensor
    out: torch.Tensor | None
    weight_buffer: int | None


def after_backward(callback: Callable[[], None]) -> None:
    """Run `callback` once autograd has finished the backward pass now running."""
    Variable._execution_engine.queue_callback(callback)


class Schedule:
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
        self.chunk = buffers.staging.numel() // self.world_size  # per rank, per piece
        self.staging_lane = StagingLane(buffers.staging, buffers.reduced, None)
        self.lanes = [self.staging_lane]  # the staging, plus lent weight buffers' lanes
        self.weight_lanes = [self._lanes_in(k) for k in range(len(buffers.weight))]
        # Unit reduce-scatters in issue order, each with the lane it reads.
        self.in_flight: deque[tuple[ReduceScatterInFlight, StagingLane]] = deque()
        self.resident_reduce_scatter: ReduceScatterInFlight | None = None
        self.grads_waiting: set[int] = set()  # units whose gradients sit in a grad buffer
        self.micro = 0
        # Squared L2 norm of each unit's (and, last, the resident's) final reduced shard,
        # summed in fp64 as the reduce-scatters finish; valid once the step's last backward
        # has ended and until the gradients are clipped or a new step opens.
        self.grad_sq_norms = torch.zeros(len(layout.units) + 1, dtype=torch.float64)
        self.grad_sq_norms = self.grad_sq_norms.to(buffers.device)
        self.grad_norms_valid = False
        # The global squared norm: its all-reduce starts as the last shard's norm is known
        # (the end of the step's last backward); clipping waits for it.
        self.norm_total: torch.Tensor | None = None
        self.norm_reduced: Event = DONE
        self._range: Any = None  # the open record_function of the current unit

    def invalidate(self) -> None:
        """The master weights changed outside a step: the next forward gathers afresh."""
        self.phase = Phase.IDLE

    # ---- forward ----------------------------------------------------------------------

    def on_root_forward(self) -> None:
        if self.phase is Phase.IDLE:
            self._open_step()
        self._attach_grads()  # an optimizer's zero_grad may have dropped them since
        self._gather(0)
        # Resident weights may be used anywhere in the forward, even before the first unit.
        with record_function(f"yafsdp.wait.all_gather.{self.layout.resident.name}"):
            self.resident_ready.wait()
        self.resident_ready = DONE

    def pre_forward(self, i: int) -> None:
        if i + 1 < len(self.layout.units):
            self._gather(i + 1)
        self._wait_weights(i)
        self.log.append(("forward", f"unit{i}"))
        self._open_range(f"yafsdp.forward.unit{i}")

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
        self.log.append(("backward", f"unit{i}"))
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
        self._open_range(f"yafsdp.backward.unit{i}")

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
        with record_function("yafsdp.wait.in_flight"):
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
        with record_function(f"yafsdp.all_gather.{name}"):
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
        with record_function(f"yafsdp.all_gather.{unit.name}"):
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
        with record_function(f"yafsdp.wait.all_gather.unit{i}"):
            slot.ready.wait()
        slot.ready = DONE

    # ---- gradients --------------------------------------------------------------------

    def _reduce_scatter(self, i: int) -> None:
        """Reduce-scatter unit i's gradient buffer through staging lanes: in one piece, or,
        for a unit larger than the staging, in chunks (chunk c holds the c-th piece of every
        rank's shard, so each reduce-scatter yields a piece of this rank's shard). A piece
        takes a free lane, or the lane of the oldest reduce-scatter once that one is done."""
        b = self.buffers
        unit = self.layout.units[i]
        self.grads_waiting.discard(i)
        self._complete_grads(i)
        p, shard = self.world_size, unit.shard_numel
        grad = b.grad[b.buffer_of[i]][: unit.padded_numel].view(p, shard)
        master_grad = b.master_grad[b.master_shard(unit)]
        for lo in range(0, shard, self.chunk):
            n = min(self.chunk, shard - lo)
            lane = self._free_lane()
            if lane is None:
                lane = self._finish_oldest_reduce_scatter()
            staging = lane.full[: p * n]
            staging.view(p, n).copy_(grad[:, lo : lo + n])
            out = lane.out[:n] if lane.out is not None else None
            rs = self._launch_reduce_scatter(unit.name, out, staging, master_grad[lo : lo + n], i)
            self.in_flight.append((rs, lane))

    def _pieces(self, i: int) -> int:
        return -(-self.layout.units[i].shard_numel // self.chunk)

    def _free_lanes(self) -> list[StagingLane]:
        busy = {id(lane) for _, lane in self.in_flight}
        return [lane for lane in self.lanes if id(lane) not in busy]

    def _free_lane(self) -> StagingLane | None:
        return next(iter(self._free_lanes()), None)

    def _finish_oldest_reduce_scatter(self) -> StagingLane:
        rs, lane = self.in_flight.popleft()
        self._add_into_master_grad(rs)
        return lane

    def _lanes_in(self, k: int) -> list[StagingLane]:
        """Weight buffer k cut into staging-sized lanes of the reduce dtype (views, no bytes:
        a buffer smaller than one lane, e.g. bf16 weights for an fp32 reduction, gives none)."""
        b, p = self.buffers, self.world_size
        out_numel = self.chunk if b.reduced is not None else 0
        lane_numel = p * self.chunk + out_numel
        dtype = b.staging.dtype
        raw = b.weight[k].view(torch.uint8)
        room = raw[: raw.numel() // dtype.itemsize * dtype.itemsize].view(dtype)
        lanes = []
        for lo in range(0, room.numel() - lane_numel + 1, lane_numel):
            full = room[lo : lo + p * self.chunk]
            out = room[lo + p * self.chunk : lo + lane_numel] if out_numel else None
            lanes.append(StagingLane(full, out, k))
        return lanes

    def _lend_weight_buffers(self, done_from: int) -> None:
        """Lend to the reduce-scatters every weight buffer whose unit has finished backward
        (index >= done_from) and is not read again before the next gather into it: any unit
        on the step's last micro-batch, else all but the units the next forward keeps
        gathered. Its slot forgets the unit; a gather into it first takes the lanes back."""
        lent = {lane.weight_buffer for lane in self.lanes}
        for k, slot in enumerate(self.slots):
            if k in lent or not self.weight_lanes[k]:
                continue
            if slot.owner is not None and slot.owner < done_from:
                continue  # its unit's backward is still to run
            if slot.owner is not None and slot.owner < KEPT_GATHERED and not self._last_micro:
                continue  # the next micro-batch's forward reads it as it stands
            slot.ready.wait()  # a gather into it, if any, has landed
            slot.owner, slot.version, slot.ready = None, -1, DONE
            self.lanes.extend(self.weight_lanes[k])

    def _take_back(self, k: int) -> None:
        """Weight buffer k is about to be gathered into: wait for the reduce-scatters that
        read its lanes (finishing in issue order) and stop lending it."""
        if all(lane.weight_buffer != k for lane in self.lanes):
            return
        while any(lane.weight_buffer == k for _, lane in self.in_flight):
            self._finish_oldest_reduce_scatter()
        self.lanes = [lane for lane in self.lanes if lane.weight_buffer != k]

    def _reduce_scatter_finished_units(self, i: int) -> None:
        """Issue now, highest unit first, the waiting units whose gradient buffer no unit
        from i down uses again in this backward (the output unit's own buffer; at the tail,
        the last layers'), as long as free lanes hold all of a unit's pieces: nothing would
        make them wait, and waiting for the end of backward leaves them exposed there."""
        needed = {self.buffers.buffer_of[j] for j in range(i + 1)}
        for u in sorted(self.grads_waiting, reverse=True):
            if self.buffers.buffer_of[u] in needed:
                continue
            if len(self._free_lanes()) < self._pieces(u):
                return
            self._reduce_scatter(u)

    def _reduce_scatter_while_lanes_free(self) -> None:
        """Issue the waiting units' reduce-scatters now (highest unit first, the order the end
        of backward uses), as long as each fits in free lanes: never wait for a lane here.
        Only while a weight buffer is lent: the staging alone keeps the lazy order."""
        if all(lane.weight_buffer is None for lane in self.lanes):
            return
        for u in sorted(self.grads_waiting, reverse=True):
            if len(self._free_lanes()) < self._pieces(u):
                return
            self._reduce_scatter(u)

    @property
    def _last_micro(self) -> bool:
        return self.micro + 1 == self.grad_accum_steps

    def _launch_reduce_scatter(
        self,
        name: str,
        out: torch.Tensor | None,
        full: torch.Tensor,
        master_grad: torch.Tensor,
        norm_index: int,
    ) -> ReduceScatterInFlight:
        result: list[torch.Tensor] = []

        def collective(async_op: bool) -> dist.Work | None:
            work, reduced = self.comm.reduce_scatter(out, full, async_op)
            result.append(reduced)
            return work

        with record_function(f"yafsdp.reduce_scatter.{name}"):
            done = self.streams.launch(collective, self.streams.compute_event())
        self.log.append(("reduce_scatter", name))
        sq_norm = self.grad_sq_norms[norm_index]
        return ReduceScatterInFlight(name, done, result[0], master_grad, sq_norm, self._last_micro)

    def _finish_reduce_scatters(self) -> None:
        """Wait for every reduce-scatter in flight, the units' in issue order, then the
        resident unit's."""
        while self.in_flight:
            self._finish_oldest_reduce_scatter()
        self._finish_resident_reduce_scatter()

    def _finish_resident_reduce_scatter(self) -> None:
        if self.resident_reduce_scatter is not None:
            self._add_into_master_grad(self.resident_reduce_scatter)
            self.resident_reduce_scatter = None

    # ---- clipping ---------------------------------------------------------------------

    def _launch_norm_all_reduce(self) -> None:
        """Start the all-reduce of the summed squared shard norms (every rank, in the same
        place of its collective order: the end of the step's last backward)."""
        total = self.grad_sq_norms.sum()
        with record_function("yafsdp.all_reduce.clip"):
            self.norm_reduced = self.streams.launch(
                lambda a: self.comm.all_reduce_sum(total, a), self.streams.compute_event()
            )
        self.norm_total = total
        self.log.append(("all_reduce", "clip"))

    def _drop_norm_all_reduce(self) -> None:
        self.norm_reduced.wait()
        self.norm_reduced, self.norm_total = DONE, None

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """Clip the sharded gradients by their global L2 norm; return the norm (see
        `YaFSDP.clip_grad_norm_`)."""
        b = self.buffers
        sq = self.norm_total
        if self.grad_norms_valid and sq is not None:  # reduced since the end of backward
            with record_function("yafsdp.wait.all_reduce.clip"):
                self.norm_reduced.wait()
        else:  # clipped already, or gradients changed outside backward
            self._drop_norm_all_reduce()
            self.grad_sq_norms.zero_()
            for i, g in enumerate((b.master_grad, b.resident_master_grad)):
                add_squared_norm(self.grad_sq_norms[i], g)
            sq = self.grad_sq_norms.sum()
            with record_function("yafsdp.all_reduce.clip"):
                self.comm.all_reduce_sum(sq)
            self.log.append(("all_reduce", "clip"))
        self.norm_reduced, self.norm_total = DONE, None
        self.grad_norms_valid = False  # the scale below changes the gradients
        norm = sq.sqrt()
        coef = (max_norm / (norm + 1e-6)).clamp(max=1.0).float()
        b.master_grad.mul_(coef)
        b.resident_master_grad.mul_(coef)
        return norm.float()

    # ---- profiler ranges --------------------------------------------------------------

    def _open_range(self, name: str) -> None:
        self.close_range()
        self._range = record_function(name)
        self._range.__enter__()

    def _add_into_master_grad(self, rs: ReduceScatterInFlight) -> None:
        """Wait for the reduce-scatter and add this rank's summed chunk to the master grad."""
        self.log.append(("wait_reduce_scatter", rs.name))
        with record_function(f"yafsdp.wait.reduce_scatter.{rs.name}"):
            rs.done.wait()
        rs.master_grad.add_(rs.reduced)
        if rs.last_micro:
            # The one division of the step (the reduction was a plain sum), and the shard's
            # norm, both while the slice is still in cache.
            rs.master_grad.div_(self.world_size * self.grad_accum_steps)
            add_squared_norm(rs.sq_norm, rs.master_grad)
