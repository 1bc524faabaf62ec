"""Load a Chrome trace (.json or .json.gz) into a flat table of timed events.

The file is streamed: the top-level object is walked key by key and the `traceEvents` array is
decoded one event at a time, each event dropping straight into compact columns. A 200 MB trace
therefore never exists as a list of Python dicts (which would need several GB).

Columns of `Trace.events` (one row per complete "X" event, times in microseconds):
    name, cat, pid, tid   categorical strings
    ts, dur               float64
    stream                int64, the GPU stream of kernels/memcpy/memset, -1 for CPU events
    correlation           int64, links a GPU kernel to its CPU launch, -1 when absent
    step                  int64, the ProfilerStep#N the event belongs to, -1 when outside

`Trace.collectives` holds, for each event whose args describe a collective (Kineto copies
them onto NCCL kernels: "Collective name", "In msg nelems", ...), its row in `events` and
those fields, so a collective's bytes and process group are known without the raw args.

Complete events of a category this parser does not know (a newer or older Kineto) are left
out of the table and counted in `Trace.ignored`, so a summary can say what it skipped.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import zlib
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import pandas as pd

from harness.trace.lanes import GPU_CATEGORIES, STEP_PATTERN, step_marks, where

__all__ = ["GPU_CATEGORIES", "Trace", "TraceError", "load_trace", "where"]

_CHUNK_CHARS = 1 << 20
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
# Kineto's complete-event categories (ActivityType names); "" for hand-written traces
KNOWN_CATEGORIES = frozenset(
    {
        "",
        "Trace",
        "cpu_op",
        "user_annotation",
        "gpu_user_annotation",
        "python_function",
        "cpu_instant_event",
        "overhead",
        "cuda_runtime",
        "cuda_driver",
        "cuda_sync",
        "cuda_profiler_range",
        "privateuse1_runtime",
        "privateuse1_driver",
        "external_correlation",
        "collective_comm",
        *GPU_CATEGORIES,
    }
)


COLLECTIVE_COLUMNS = [
    "row", "collective", "in_nelems", "out_nelems", "dtype", "group", "group_size", "seq",
]  # fmt: skip


class TraceError(ValueError):
    """A trace file that cannot be used (missing, empty, truncated, not a Chrome trace)."""


@dataclass(frozen=True)
class Trace:
    path: Path
    metadata: dict[str, Any]  # every top-level key except traceEvents
    events: pd.DataFrame
    thread_names: dict[tuple[str, str], str] = field(default_factory=dict)
    ignored: dict[str, int] = field(default_factory=dict)  # unknown category -> events
    collectives: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=COLLECTIVE_COLUMNS)
    )

    @property
    def rank(self) -> int | None:
        info = self.metadata.get("distributedInfo") or {}
        rank = info.get("rank")
        return int(rank) if rank is not None else None


class _Stream:
    """A character buffer over a text file that decodes one JSON value at a time."""

    def __init__(self, fh: TextIO) -> None:
        self.fh = fh
        self.buf = ""
        self.pos = 0
        self.eof = False

    def _fill(self) -> bool:
        data = self.fh.read(_CHUNK_CHARS)
        if not data:
            self.eof = True
            return False
        self.buf = self.buf[self.pos :] + data
        self.pos = 0
        return True

    def peek(self) -> str:
        """The next non-blank character ('' at the end of the file), without consuming it."""
        while True:
            blank = _WS.match(self.buf, self.pos)
            assert blank is not None  # _WS matches the empty string too
            self.pos = blank.end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._fill():
                return ""

    def take(self, expected: str) -> None:
        ch = self.peek()
        if ch != expected:
            what = "end of file" if ch == "" else repr(ch)
            raise json.JSONDecodeError(f"expected {expected!r}, found {what}", self.buf, self.pos)
        self.pos += 1

    def value(self) -> Any:
        while True:
            if self.peek() == "":
                raise json.JSONDecodeError("unexpected end of file", self.buf, self.pos)
            try:
                obj, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError:
                # The value may simply be cut by the chunk boundary; only EOF makes it an error.
                if self._fill():
                    continue
                raise
            if end == len(self.buf) and not self.eof and self._fill():
                continue  # a number at the buffer's end may continue in the next chunk
            self.pos = end
            return obj

    def array_items(self) -> Iterator[Any]:
        self.take("[")
        if self.peek() == "]":
            self.pos += 1
            return
        while True:
            yield self.value()
            if self.peek() == ",":
                self.pos += 1
                continue
            self.take("]")
            return


class _Columns:
    """Compact column builders; strings (and ids) are interned into category codes."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[Any, int]] = {k: {} for k in ("name", "cat", "pid", "tid")}
        self.codes = {k: array("i") for k in self.tables}
        self.ts = array("d")
        self.dur = array("d")
        self.stream = array("q")
        self.correlation = array("q")
        self.thread_names: dict[tuple[str, str], str] = {}
        self.ignored: dict[str, int] = {}
        self.collectives: list[tuple[Any, ...]] = []
        self.untimed: dict[str, int] = {}  # name -> complete events without ts or dur

    def add(self, e: Any) -> None:
        if not isinstance(e, dict):
            return
        ph = e.get("ph")
        if ph == "X":
            dur = e.get("dur")
            ts = e.get("ts")
            if not isinstance(dur, (int, float)) or not isinstance(ts, (int, float)):
                untimed = str(e.get("name", ""))
                self.untimed[untimed] = self.untimed.get(untimed, 0) + 1
                return
            cat = e.get("cat") or ""
            if cat not in KNOWN_CATEGORIES:
                self.ignored[str(cat)] = self.ignored.get(str(cat), 0) + 1
                return
            args = e.get("args") or {}
            # this runs once per event of a possibly huge file: plain dict interning, no calls
            for column, value in (
                ("name", e.get("name", "")),
                ("cat", cat),
                ("pid", e.get("pid", "")),
                ("tid", e.get("tid", "")),
            ):
                table = self.tables[column]
                self.codes[column].append(table.setdefault(value, len(table)))
            self.ts.append(float(ts))
            self.dur.append(float(dur))
            stream = args.get("stream", -1) if cat in GPU_CATEGORIES else -1
            self.stream.append(stream if isinstance(stream, int) else -1)
            corr = args.get("correlation", -1)
            self.correlation.append(corr if isinstance(corr, int) else -1)
            if "Collective name" in args:
                self._add_collective(args)
        elif ph == "M" and e.get("name") == "thread_name":
            name = (e.get("args") or {}).get("name")
            if isinstance(name, str):
                # torch may name a thread twice; the first name is the specific one
                self.thread_names.setdefault((str(e.get("pid")), str(e.get("tid"))), name)

    def _add_collective(self, args: dict[str, Any]) -> None:
        def count(key: str) -> int:
            value = args.get(key, -1)
            return value if isinstance(value, int) else -1

        self.collectives.append(
            (
                len(self.ts) - 1,
                str(args.get("Collective name", "")),
                count("In msg nelems"),
                count("Out msg nelems"),
                str(args.get("dtype", "")),
                str(args.get("Process Group Name", "")),
                count("Group size"),
                count("Seq"),
            )
        )

    def collective_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.collectives, columns=COLLECTIVE_COLUMNS)

    def _categorical(self, column: str) -> pd.Categorical:
        # ids may be ints or strings (pid 0 and "Spans"); the table holds them as strings
        labels = np.array([str(k) for k in self.tables[column]], dtype=object)
        categories, remap = np.unique(labels, return_inverse=True)
        codes = np.frombuffer(self.codes[column], dtype=np.int32)
        return pd.Categorical.from_codes(remap[codes], categories=categories)

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "name": self._categorical("name"),
                "cat": self._categorical("cat"),
                "pid": self._categorical("pid"),
                "tid": self._categorical("tid"),
                "ts": np.frombuffer(self.ts, dtype=np.float64),
                "dur": np.frombuffer(self.dur, dtype=np.float64),
                "stream": np.frombuffer(self.stream, dtype=np.int64),
                "correlation": np.frombuffer(self.correlation, dtype=np.int64),
            }
        )


def _open_text(path: Path) -> TextIO:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


def _read(path: Path) -> tuple[dict[str, Any], _Columns]:
    cols = _Columns()
    metadata: dict[str, Any] = {}
    with _open_text(path) as fh:
        s = _Stream(fh)
        first = s.peek()
        if first == "":
            raise TraceError(f"{path}: empty trace file")
        if first == "[":  # the Chrome "JSON Array Format": a bare list of events
            for e in s.array_items():
                cols.add(e)
            return metadata, cols
        s.take("{")
        seen_events = False
        if s.peek() == "}":
            s.pos += 1
        else:
            while True:
                key = s.value()
                s.take(":")
                if key == "traceEvents":
                    seen_events = True
                    for e in s.array_items():
                        cols.add(e)
                else:
                    metadata[key] = s.value()
                if s.peek() == ",":
                    s.pos += 1
                    continue
                s.take("}")
                break
        if not seen_events:
            raise TraceError(f"{path}: not a Chrome trace (no traceEvents)")
    return metadata, cols


def _assign_steps(events: pd.DataFrame) -> np.ndarray:
    """ProfilerStep#N of each event: CPU events by time, GPU events through their launch.

    Only the CPU marks on the training thread count: Kineto's GPU-lane copies of
    ProfilerStep#N are shorter and would overlap the CPU windows."""
    step = np.full(len(events), -1, dtype=np.int64)
    is_step = step_marks(events)
    if not is_step.any():
        return step
    starts = events["ts"].to_numpy()[is_step]
    ends = starts + events["dur"].to_numpy()[is_step]
    names = events["name"][is_step].astype(str)
    numbers = names.str.extract(STEP_PATTERN)[0].astype(np.int64).to_numpy()
    order = np.argsort(starts)
    starts, ends, numbers = starts[order], ends[order], numbers[order]

    ts = events["ts"].to_numpy()
    idx = np.searchsorted(starts, ts, side="right") - 1
    inside = (idx >= 0) & (ts < ends[np.clip(idx, 0, None)])
    step[inside] = numbers[idx[inside]]

    gpu = events["stream"].to_numpy() >= 0
    corr = events["correlation"].to_numpy()
    launch = ~gpu & (corr >= 0) & (step >= 0)
    if gpu.any() and launch.any():
        by_corr = pd.Series(step[launch], index=corr[launch])
        by_corr = by_corr[~by_corr.index.duplicated()]
        linked = by_corr.reindex(corr[gpu]).to_numpy()
        gpu_steps = step[gpu]
        has = ~np.isnan(linked)
        gpu_steps[has] = linked[has].astype(np.int64)
        gpu_steps[~has & (corr[gpu] >= 0)] = -1  # launched outside any step
        step[gpu] = gpu_steps
    return step


def load_trace(path: Path | str) -> Trace:
    """Parse one Chrome trace file; raise TraceError naming the file if it is unusable."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such trace file")
    try:
        metadata, cols = _read(path)
    except TraceError:
        raise
    except json.JSONDecodeError as e:
        raise TraceError(f"{path}: truncated or corrupt trace ({e.msg})") from e
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise TraceError(f"{path}: truncated or corrupt gzip stream ({e})") from e
    except (UnicodeDecodeError, OSError) as e:
        raise TraceError(f"{path}: unreadable trace ({e})") from e
    if cols.untimed:  # without them the busy time would silently shrink
        n, first = sum(cols.untimed.values()), next(iter(cols.untimed))
        raise TraceError(
            f"{path}: {n} complete (ph 'X') events have no numeric ts or dur (the first: "
            f"{first!r}); this is not a trace torch.profiler wrote, profile the job again"
        )
    events = cols.frame()
    if events.empty:
        raise TraceError(f"{path}: trace holds no complete (ph 'X') events")
    events["step"] = _assign_steps(events)
    return Trace(
        path=path,
        metadata=metadata,
        events=events,
        thread_names=cols.thread_names,
        ignored=cols.ignored,
        collectives=cols.collective_frame(),
    )
