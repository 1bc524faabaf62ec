"""A stand-in for the part of `torch.cuda` the engine's stream branch calls, on CPU.

`Stream`, `Event`, `current_stream` and `stream` keep the ordering a GPU would: every call
is first bound to the real `torch.cuda` signature (a wrong argument raises here as it would
on a GPU), then turned into the vector-clock updates of `torch.cuda._sanitizer`'s
`StreamSynchronizations` (an event records its stream's clock; a stream waiting on it takes
the maximum). Kernels are logged by `race_log.AccessLog` under `current()`, the stream a
`with stream(s)` block made current.

`drop_waits_of` names streams whose `wait_event` is ignored: the negative tests remove one
direction of waiting this way and expect races.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.cuda._sanitizer import DEFAULT_STREAM_ID, StreamSynchronizations


def bind(real: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Raise TypeError unless (args, kwargs) bind to `real`'s signature."""
    inspect.signature(real).bind(*args, **kwargs)


class FakeCuda:
    """One device's streams and events; `module()` is what the engine sees as `torch.cuda`."""

    def __init__(self, drop_waits_of: frozenset[str] = frozenset()) -> None:
        self.syncs = StreamSynchronizations()
        self.drop_waits_of = drop_waits_of
        self.calls: list[str] = []  # every API call, for the tests of this fake
        self._ids = iter(range(1, 1 << 30))
        self.default = self._new_stream("compute", DEFAULT_STREAM_ID)
        self._stack: list[FakeStream] = [self.default]

    def _new_stream(self, name: str, sid: int | None = None) -> FakeStream:
        sid = next(self._ids) if sid is None else sid
        self.syncs.create_stream(sid)  # a no-op for the default stream, created with syncs
        return FakeStream(self, sid, name)

    def current(self) -> FakeStream:
        return self._stack[-1]

    # ---- the torch.cuda functions ------------------------------------------------------

    def Stream(self, *args: Any, **kwargs: Any) -> FakeStream:  # noqa: N802 (torch's name)
        bind(torch.cuda.Stream, *args, **kwargs)
        _check_device(inspect.signature(torch.cuda.Stream).bind(*args, **kwargs).arguments)
        self.calls.append("Stream")
        return self._new_stream("comm")

    def Event(self, *args: Any, **kwargs: Any) -> FakeEvent:  # noqa: N802 (torch's name)
        bind(torch.cuda.Event, *args, **kwargs)
        self.calls.append("Event")
        event = FakeEvent(self, next(self._ids))
        self.syncs.create_event(event.id)
        return event

    def current_stream(self, *args: Any, **kwargs: Any) -> FakeStream:
        bind(torch.cuda.current_stream, *args, **kwargs)
        _check_device(inspect.signature(torch.cuda.current_stream).bind(*args, **kwargs).arguments)
        self.calls.append("current_stream")
        return self.current()

    def stream(self, *args: Any, **kwargs: Any) -> Any:
        bind(torch.cuda.stream, *args, **kwargs)
        (s,) = [*args, *kwargs.values()]
        _expect(s, FakeStream, "torch.cuda.stream(stream)")
        self.calls.append("stream")
        return self._entered(s)

    @contextmanager
    def _entered(self, s: FakeStream) -> Iterator[None]:
        self._stack.append(s)
        try:
            yield
        finally:
            self._stack.pop()

    def module(self) -> types.SimpleNamespace:
        """The four names the engine reads from `torch.cuda`."""
        return types.SimpleNamespace(
            Stream=self.Stream,
            Event=self.Event,
            current_stream=self.current_stream,
            stream=self.stream,
        )


class FakeStream:
    def __init__(self, cuda: FakeCuda, sid: int, name: str) -> None:
        self.cuda, self.id, self.name = cuda, sid, name

    def wait_event(self, *args: Any, **kwargs: Any) -> None:
        bind(torch.cuda.Stream.wait_event, self, *args, **kwargs)
        (event,) = [*args, *kwargs.values()]
        _expect(event, FakeEvent, "Stream.wait_event(event)")
        self.cuda.calls.append(f"{self.name}.wait_event")
        if not event.recorded:
            # CUDA ignores a wait on an event never recorded: the order it meant is lost.
            raise AssertionError("a stream waits on an event that was never recorded")
        if self.name not in self.cuda.drop_waits_of:
            self.cuda.syncs.stream_wait_for_event(self.id, event.id)

    def wait_stream(self, *args: Any, **kwargs: Any) -> None:
        bind(torch.cuda.Stream.wait_stream, self, *args, **kwargs)
        (other,) = [*args, *kwargs.values()]
        _expect(other, FakeStream, "Stream.wait_stream(stream)")
        event = self.cuda.Event()
        event.record(other)
        self.wait_event(event)

    def __repr__(self) -> str:
        return f"<fake {self.name} stream {self.id}>"


class FakeEvent:
    def __init__(self, cuda: FakeCuda, eid: int) -> None:
        self.cuda, self.id, self.recorded = cuda, eid, False

    def record(self, *args: Any, **kwargs: Any) -> None:
        bind(torch.cuda.Event.record, self, *args, **kwargs)
        given = [*args, *kwargs.values()]
        stream = given[0] if given and given[0] is not None else self.cuda.current()
        _expect(stream, FakeStream, "Event.record(stream)")
        self.cuda.calls.append(f"record on {stream.name}")
        self.cuda.syncs.record_state(self.id, stream.id)
        self.recorded = True

    def wait(self, *args: Any, **kwargs: Any) -> None:
        bind(torch.cuda.Event.wait, self, *args, **kwargs)
        given = [*args, *kwargs.values()]
        stream = given[0] if given and given[0] is not None else self.cuda.current()
        stream.wait_event(self)


def _expect(value: object, kind: type, call: str) -> None:
    if not isinstance(value, kind):
        raise TypeError(f"{call} got {type(value).__name__}, not a {kind.__name__}")


def _check_device(arguments: dict[str, Any]) -> None:
    device = arguments.get("device")
    if device is not None and not isinstance(device, torch.device | str | int):
        raise TypeError(f"device must be a torch.device, str or int, got {device!r}")
    if isinstance(device, torch.device) and device.type != "cuda":
        raise TypeError(f"a CUDA stream on a {device.type} device")
