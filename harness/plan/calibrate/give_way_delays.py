"""Start delays of side-stream kernels from a CUDA trace, and the calibration they make.

The one-GPU give-way probe (`give_way_probe.py`) runs GEMMs on a compute stream and, on a
side stream, a spin kernel (`torch.cuda._sleep`) followed by a chain of side kernels. The
spin kernel's end is the moment the chain becomes ready, at a chosen phase of a running
GEMM. This module turns the trace's kernel spans into each side kernel's start delay:
- `ready`: the end of the kernel before it on the side stream (the spin kernel, or the
  previous kernel of the chain);
- `blocker`: the compute kernel holding the SMs at `ready`, else the compute kernel that
  starts after `ready` but before the side kernel (it took the SMs first), else none;
- `wait` = start - ready; as a share of the blocker's time left (`wait / remaining`), and
  in the blocker's waves (`wait / wave`, a wave being its duration over its wave count).
The medians become the `"give_way"` section of a calibration file, keyed by the fields of
`give_way.GiveWayConstants`. No torch here: the arithmetic is tested on hand-built spans.
"""

from __future__ import annotations

import datetime
import json
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.plan.calibrate.calibration import SCHEMA
from harness.plan.time.give_way import GiveWayConstants

MARKER = "spin_kernel"  # torch.cuda._sleep's kernel (aten/src/ATen/cuda/Sleep.cu)


@dataclass(frozen=True)
class Span:
    name: str
    stream: int
    start_us: float
    end_us: float

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us


@dataclass(frozen=True)
class StartDelay:
    kernel: str
    position: int  # 0: the first kernel after the spin kernel
    ready_us: float
    start_us: float
    blocker: Span | None

    @property
    def wait_us(self) -> float:
        return self.start_us - self.ready_us

    @property
    def remaining_us(self) -> float | None:
        return None if self.blocker is None else self.blocker.end_us - self.ready_us

    def share_of_remaining(self) -> float | None:
        """The wait as a share of the blocker's time left at `ready` (1.0: to its end)."""
        left = self.remaining_us
        return None if left is None or left <= 0 else self.wait_us / left

    def in_waves(self, waves: int) -> float | None:
        """The wait in waves of the blocker, which runs `waves` waves."""
        if self.blocker is None or waves < 1 or self.blocker.duration_us <= 0:
            return None
        return self.wait_us / (self.blocker.duration_us / waves)


def gemm_waves(m: int, n: int, tile: tuple[int, int], sms: int) -> int:
    """Waves of an m x n GEMM output in `tile` tiles over `sms` SMs (one tile per SM at a
    time, as the planner's compute model counts them)."""
    return max(1, math.ceil(math.ceil(m / tile[0]) * math.ceil(n / tile[1]) / sms))


def kernel_spans(trace: dict[str, Any]) -> list[Span]:
    """The GPU kernels of a Chrome trace exported by torch.profiler (Kineto: `"cat":
    "kernel"`, microsecond `ts` and `dur`, the stream in `args`)."""
    spans = []
    for e in trace.get("traceEvents", []):
        if e.get("cat") != "kernel" or e.get("ph") != "X":
            continue
        start = float(e["ts"])
        spans.append(Span(str(e["name"]), int(e["args"]["stream"]), start,
                          start + float(e["dur"])))  # fmt: skip
    return sorted(spans, key=lambda s: s.start_us)


def _side_stream(spans: list[Span]) -> int:
    streams = {s.stream for s in spans if MARKER in s.name}
    if len(streams) != 1:
        raise ValueError(f"expected the {MARKER} kernels on one stream, found {len(streams)}")
    return streams.pop()


def _blocker(compute: list[Span], ready: float, start: float) -> Span | None:
    holding = [c for c in compute if c.start_us <= ready < c.end_us]
    if holding:
        return max(holding, key=lambda c: c.start_us)
    first = [c for c in compute if ready <= c.start_us < start]
    return first[0] if first else None


def start_delays(spans: Iterable[Span]) -> list[StartDelay]:
    """Every side kernel after a spin kernel, with its ready time, start and blocker."""
    spans = sorted(spans, key=lambda s: s.start_us)
    side = _side_stream(spans)
    compute = [s for s in spans if s.stream != side]
    out: list[StartDelay] = []
    previous: Span | None = None
    position = 0
    for span in (s for s in spans if s.stream == side):
        if MARKER in span.name:
            previous, position = span, 0
            continue
        if previous is None:
            continue  # side work before the first spin kernel: nothing marks its readiness
        ready = previous.end_us
        out.append(StartDelay(span.name, position, ready, span.start_us,
                              _blocker(compute, ready, span.start_us)))  # fmt: skip
        previous, position = span, position + 1
    return out


def launches_per_chain(spans: Iterable[Span]) -> list[int]:
    """Side kernels between consecutive spin kernels: 2 per cast where 32-bit indexing
    splits it."""
    spans = sorted(spans, key=lambda s: s.start_us)
    side = _side_stream(spans)
    counts: list[int] = []
    for span in (s for s in spans if s.stream == side):
        if MARKER in span.name:
            counts.append(0)
        elif counts:
            counts[-1] += 1
    return counts


@dataclass(frozen=True)
class Session:
    """One profiled run: which side work (`chain`: cast and divide; `collective`: the copy
    standing in for one), at which stream priority, behind a GEMM of which waves."""

    side: str
    priority: int
    gemm: tuple[int, int, int]
    waves: int
    delays: tuple[StartDelay, ...]
    launches: tuple[int, ...] = ()  # side kernels per trial (`launches_per_chain`)


def _median(values: Iterable[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


# (side, priority) -> the constant its samples measure, and how: share of the blocker's
# time left (equal priority) or waves of it (high priority).
MEASURES = {
    ("chain", 0): ("equal_priority_wait", "share"),
    ("chain", -1): ("high_priority_wait_waves", "waves"),
    ("collective", 0): ("collective_equal_priority_wait", "share"),
    ("collective", -1): ("collective_high_priority_wait_waves", "waves"),
}


def constants_from(sessions: Iterable[Session]) -> dict[str, float]:
    """The medians over every sample of each (side, priority), keyed by constant."""
    samples: dict[str, list[float | None]] = {}
    for s in sessions:
        if (s.side, s.priority) not in MEASURES:
            raise ValueError(f"no constant is measured by side={s.side!r} priority={s.priority}")
        name, how = MEASURES[(s.side, s.priority)]
        got = samples.setdefault(name, [])
        for d in s.delays:
            got.append(d.share_of_remaining() if how == "share" else d.in_waves(s.waves))
    out = {k: m for k, v in samples.items() if (m := _median(v)) is not None}
    fields = set(GiveWayConstants.__dataclass_fields__)
    assert set(out) <= fields, set(out) - fields  # keys the constants' reader accepts
    return out


def summary(sessions: Iterable[Session]) -> list[dict[str, Any]]:
    """Per session: its samples' median wait, how many had no compute kernel in the way, and
    how many kernels the side work launched per trial (the 32-bit indexing split shows)."""
    rows = []
    for s in sessions:
        rows.append({
            "side": s.side, "priority": s.priority, "gemm_mnk": list(s.gemm),
            "waves": s.waves, "samples": len(s.delays),
            "unblocked": sum(d.blocker is None for d in s.delays),
            "median_wait_us": _median(d.wait_us for d in s.delays),
            "launches_per_trial": sorted(set(s.launches)),
        })  # fmt: skip
    return rows


def calibration_document(
    sessions: list[Session], *, device: str, sm_count: int, torch_version: str, notes: str
) -> dict[str, Any]:
    """A calibration file (`calibration=` reads it) holding only a `"give_way"` section."""
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    section: dict[str, Any] = {**constants_from(sessions), "sm_count": sm_count}
    section.update(source="python -m harness.plan.probe give-way", device=device,
                   measured_at=when, torch_version=torch_version, notes=notes,
                   samples=summary(sessions))  # fmt: skip
    return {"schema": SCHEMA, "measured_at": when, "give_way": section}


def write_calibration(path: Path, document: dict[str, Any]) -> None:
    """Write `document`; where `path` already holds a calibration file (the collectives
    `python -m harness.bandwidth` measured), add or replace only its give_way section, so
    one `calibration=` carries both."""
    try:
        existing = json.loads(path.read_text())
    except (OSError, ValueError):
        existing = None
    if isinstance(existing, dict) and existing.get("schema") == SCHEMA:
        document = {**existing, "give_way": document["give_way"]}
    path.write_text(json.dumps(document, indent=1) + "\n")
