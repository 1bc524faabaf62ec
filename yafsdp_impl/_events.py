"""Ready/released ordering between compute and communication, on GPU and on CPU alike.

The engine speaks of *events*: a point in the compute or communication timeline that
another party waits for. On CUDA an event is a `torch.cuda.Event` and communication runs
on its own high-priority stream. On CPU there are no streams: collectives are issued with
`async_op=True` so gloo's threads move data while the main thread computes, and the work
handle plays the event. Compute on CPU is synchronous, so a compute event is already
complete when recorded. The engine itself never branches on the device.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist


class Event:
    """Something already complete; the base case (CPU compute)."""

    def wait(self) -> None:
        """Make the current compute wait for this event."""


DONE = Event()


class _WorkEvent(Event):
    def __init__(self, work: dist.Work | None) -> None:
        self.work = work

    def wait(self) -> None:
        if self.work is not None:
            self.work.wait()
            self.work = None


class _CudaEvent(Event):
    def __init__(self, event: torch.cuda.Event, device: torch.device) -> None:
        self.event = event
        self.device = device

    def wait(self) -> None:
        # The engine's device, not whichever is current: a caller need not set_device.
        torch.cuda.current_stream(self.device).wait_event(self.event)


class Streams:
    """Records compute events and launches collectives after the events they depend on."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.device = device
        self.comm_stream = torch.cuda.Stream(device, priority=-1) if self.cuda else None

    def compute_event(self) -> Event:
        """An event after everything the compute side has issued so far."""
        if not self.cuda:
            return DONE
        ev = torch.cuda.Event()
        ev.record(torch.cuda.current_stream(self.device))
        return _CudaEvent(ev, self.device)

    def launch(self, collective: Callable[[bool], dist.Work | None], after: Event) -> Event:
        """Run `collective(async_op)` once `after` has happened; return its completion event."""
        if not self.cuda:
            after.wait()
            return _WorkEvent(collective(True))
        assert self.comm_stream is not None
        if isinstance(after, _CudaEvent):
            self.comm_stream.wait_event(after.event)
        with torch.cuda.stream(self.comm_stream):
            collective(False)
            done = torch.cuda.Event()
            done.record(self.comm_stream)
        return _CudaEvent(done, self.device)
