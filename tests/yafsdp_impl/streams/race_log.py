"""Which stream read or wrote which bytes of the engine's buffers, and the races among them.

`AccessLog` follows `torch.cuda._sanitizer`'s rule (a kernel's access conflicts with an
earlier one on another stream unless the stream's vector clock has passed it: at least one
is a write and no event ordered them) with two changes for this engine: accesses are byte
ranges of a storage, not whole data pointers (the engine reads one part of a buffer on one
stream while writing another part on the other: the step's first gathers read the head of
the param-dtype copy while the rest is copied), and only the tracked storages are followed
(the engine's buffers, and every tensor a collective touches, held alive so that its
address is never reused).

`KernelLog` is the `TorchDispatchMode` that feeds it: each op's reads and writes come from
its schema's alias annotations, logged under the fake current stream. Collectives are
logged by `logged_collectives`, which wraps the engine's three collectives (the fake
process group moves no data and gloo's worker threads are invisible to a dispatch mode).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from tests.yafsdp_impl.streams.fake_cuda import FakeCuda
from yafsdp_impl import _collectives


@dataclass(frozen=True)
class Access:
    write: bool
    stream: str
    stream_id: int
    seq: int
    op: str
    lo: int  # byte range [lo, hi) of the storage
    hi: int


@dataclass(frozen=True)
class Race:
    storage: str
    first: Access
    then: Access

    def __str__(self) -> str:
        kind = lambda a: "writes" if a.write else "reads"  # noqa: E731
        return (
            f"{self.storage}: {self.then.op} on {self.then.stream} {kind(self.then)} bytes "
            f"[{max(self.first.lo, self.then.lo)}, {min(self.first.hi, self.then.hi)}) that "
            f"{self.first.op} on {self.first.stream} {kind(self.first)}, with no event between"
        )


def byte_range(t: torch.Tensor) -> tuple[int, int] | None:
    """The bytes of its storage `t` may touch (its span; None when empty)."""
    if t.numel() == 0:
        return None
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))
    lo = t.storage_offset() * t.element_size()
    return lo, lo + (last + 1) * t.element_size()


@dataclass
class AccessLog:
    cuda: FakeCuda
    names: dict[int, str] = field(default_factory=dict)  # storage address -> its name
    history: dict[int, list[Access]] = field(default_factory=dict)
    races: list[Race] = field(default_factory=list)
    kept: list[torch.UntypedStorage] = field(default_factory=list)  # addresses stay unique
    seq: int = 0
    kernels: dict[str, int] = field(default_factory=dict)  # stream name -> kernels logged
    touched: set[tuple[str, str, str]] = field(default_factory=set)  # (stream, storage, op)

    def track(self, name: str, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        if storage.data_ptr() not in self.names:
            self.names[storage.data_ptr()] = name
            self.kept.append(storage)

    def kernel(self, op: str, reads: list[torch.Tensor], writes: list[torch.Tensor]) -> None:
        """One kernel on the current stream, reading `reads` and writing `writes`."""
        tracked = lambda ts: [t for t in ts if t.untyped_storage().data_ptr() in self.names]  # noqa: E731
        reads, writes = tracked(reads), tracked(writes)
        if not reads and not writes:
            return
        stream = self.cuda.current()
        self.seq += 1
        self.kernels[stream.name] = self.kernels.get(stream.name, 0) + 1
        self.cuda.syncs.update_seq_num(stream.id, self.seq)
        for t, write in [(t, False) for t in reads] + [(t, True) for t in writes]:
            span = byte_range(t)
            if span is not None:
                access = Access(write, stream.name, stream.id, self.seq, op, *span)
                self._access(t.untyped_storage().data_ptr(), access)

    def _ordered(self, now: Access, before: Access) -> bool:
        return now.stream_id == before.stream_id or self.cuda.syncs.is_ordered_after(
            now.stream_id, before.seq, before.stream_id
        )

    def _access(self, ptr: int, now: Access) -> None:
        self.touched.add((now.stream, self.names[ptr], now.op))
        past = self.history.setdefault(ptr, [])
        for before in past:
            overlap = before.lo < now.hi and now.lo < before.hi
            if overlap and (now.write or before.write) and not self._ordered(now, before):
                self.races.append(Race(self.names[ptr], before, now))
        # What `now` covers and follows is implied by it for every later access (vector
        # clocks are transitive), so only `now` is kept: a write covers any access, a read
        # the reads of its own stream.
        covered = lambda b: now.lo <= b.lo and b.hi <= now.hi and (now.write or not b.write)  # noqa: E731
        past[:] = [b for b in past if not (covered(b) and self._ordered(now, b))]
        past.append(now)


class KernelLog(TorchDispatchMode):
    """Logs every ATen op's tensor reads and writes on the fake current stream."""

    def __init__(self, log: AccessLog) -> None:
        super().__init__()
        self.log = log

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = str(func)
        if name.startswith("c10d.") or func.is_view:
            return out  # collectives: `logged_collectives`; a view touches no data
        reads, writes = [], []
        schema = func._schema
        given = list(zip(schema.arguments, args, strict=False))
        given += [(a, kwargs[a.name]) for a in schema.arguments if a.name in kwargs]
        for argument, value in given:
            tensors = [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]
            info = argument.alias_info
            (writes if info is not None and info.is_write else reads).extend(tensors)
        fresh = [r.alias_info is None for r in schema.returns]
        if any(fresh):  # a new tensor: written, but never a tracked storage
            writes.extend(t for t in tree_leaves(out) if isinstance(t, torch.Tensor))
        self.log.kernel(name, reads, writes)
        return out


@contextmanager
def logged_collectives(log: AccessLog, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The engine's collectives log their reads and writes on the stream they are issued
    on (the communication stream inside `Streams.launch`), then run."""

    def wrap(name: str, reads: Callable, writes: Callable) -> None:
        real = getattr(_collectives, name)

        def logged(*args: Any, **kwargs: Any) -> Any:
            for t in [*reads(*args), *writes(*args)]:
                log.track(f"{name} tensor", t)
            log.kernel(f"{name} (collective)", reads(*args), writes(*args))
            return real(*args, **kwargs)

        monkeypatch.setattr(_collectives, name, logged)

    wrap("all_gather", lambda out, shard, *_: [shard], lambda out, shard, *_: [out])
    wrap(
        "reduce_scatter",
        lambda out, full, *_: [full],
        lambda out, full, *_: [full] if out is None else [out],
    )
    wrap("all_reduce_sum", lambda t, *_: [t], lambda t, *_: [t])
    yield
