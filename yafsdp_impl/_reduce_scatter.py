"""Reduce-scatters of the units' gradient buffers, through staging lanes.

A unit's gradient buffer is copied into a staging lane in the reduce dtype, in one piece
or, for a unit larger than the staging buffer, in chunks; each piece's reduce-scatter is
added into this rank's slice of the master gradient when it is finished. Lanes are the
staging buffer and, once backward has passed a unit, slices of its weight buffer, lent
until the next gather into it (see `Schedule`): a piece takes a free lane, or the lane of
the oldest reduce-scatter in flight once that one is done. What is lent and issued when
depends on the layout alone, so every rank issues its collectives in the same order.

`ReduceScatters` is a part of `Schedule`, kept apart by concept: its methods run on the
schedule's own state, declared below. `BufferSlot` is here as lending a weight buffer
empties its slot.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch.autograd.profiler import record_function

from yafsdp_impl import annotation_names as names
from yafsdp_impl._clipping import add_squared_norm
from yafsdp_impl._events import DONE

if TYPE_CHECKING:
    from yafsdp_impl._buffers import Buffers
    from yafsdp_impl._collectives import Comm
    from yafsdp_impl._events import Event, Streams
    from yafsdp_impl._layout import Layout

# Units 0 and 1 stay gathered from one micro-batch's backward into the next one's forward.
KEPT_GATHERED = 2


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


class ReduceScatters:
    """The staging lanes, their lending, and the reduce-scatters that read them."""

    # The schedule's state these methods read and write (set in `Schedule.__init__`).
    layout: Layout
    buffers: Buffers
    comm: Comm
    streams: Streams
    world_size: int
    grad_accum_steps: int
    micro: int
    log: list[tuple[str, str]]
    slots: list[BufferSlot]
    grads_waiting: set[int]
    grad_sq_norms: torch.Tensor

    def _init_lanes(self) -> None:
        b = self.buffers
        self.chunk = b.staging.numel() // self.world_size  # per rank, per piece
        self.staging_lane = StagingLane(b.staging, b.reduced, None)
        self.lanes = [self.staging_lane]  # the staging, plus lent weight buffers' lanes
        self.weight_lanes = [self._lanes_in(k) for k in range(len(b.weight))]
        # Unit reduce-scatters in issue order, each with the lane it reads.
        self.in_flight: deque[tuple[ReduceScatterInFlight, StagingLane]] = deque()
        self.resident_reduce_scatter: ReduceScatterInFlight | None = None

    def _complete_grads(self, i: int) -> None:
        """Make unit i's gradient buffer whole before it is read (`Schedule`'s: it keeps the
        gradient views)."""
        raise NotImplementedError

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

        with record_function(names.collective("reduce_scatter", name)):
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

    @property
    def _last_micro(self) -> bool:
        return self.micro + 1 == self.grad_accum_steps

    def _add_into_master_grad(self, rs: ReduceScatterInFlight) -> None:
        """Wait for the reduce-scatter and add this rank's summed chunk to the master grad."""
        self.log.append(("wait_reduce_scatter", rs.name))
        with record_function(names.wait("reduce_scatter", rs.name)):
            rs.done.wait()
        # A range of its own, so trace analysis counts these kernels as the engine's work.
        with record_function(names.shard_grad(rs.name)):
            rs.master_grad.add_(rs.reduced)
            if rs.last_micro:
                # The one division of the step (the reduction was a plain sum), and the
                # shard's norm, both while the slice is still in cache.
                rs.master_grad.div_(self.world_size * self.grad_accum_steps)
                add_squared_norm(rs.sq_norm, rs.master_grad)
