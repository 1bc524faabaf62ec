"""A step, attributed: each rank's profiled step split into named causes that add up to it.

One lane is swept per trace (the device on GPU traces, the main thread on CPU ones), and
every microsecond of each step window goes to exactly one cause of `harness.trace.diagnose.causes`:
see `attribute_device` and `attribute_host` for the rules. The windows are the summary's
(`step_windows`), so the exposed communication here equals the step table's. Whatever the
rules leave unassigned is its own `unattributed` row, never spread over the others.
No torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from harness.trace.classify import detect_kind
from harness.trace.diagnose import causes as C
from harness.trace.diagnose.attribute_device import attribute_device
from harness.trace.diagnose.attribute_host import attribute_host
from harness.trace.lanes import no_steps_reason
from harness.trace.overlap import step_windows
from harness.trace.parse import Trace, TraceError
from harness.trace.summary import _recorded_on_gpu
from harness.trace.sweep_line import Tally

_US = 1e-6
TOP_HOST_OPS = 5


@dataclass(frozen=True)
class StepAttribution:
    """One rank's profiled step: `causes` (cause name from harness.trace.diagnose.causes -> seconds)
    sums to `step_s`; `by_unit` splits a cause by the engine unit it belongs to, where known."""

    rank: int
    step: int
    start_us: float  # the step window's start, in the trace's own microseconds
    step_s: float
    causes: dict[str, float]
    by_unit: dict[str, dict[str, float]] = field(default_factory=dict)
    # GPU: the outermost CPU operators the host was in while the device waited for it
    # (host.* time), the largest first, at most TOP_HOST_OPS of them
    host_ops: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "step": self.step,
            "start_us": self.start_us,
            "step_s": self.step_s,
            "causes": dict(self.causes),
            "by_unit": {c: dict(u) for c, u in self.by_unit.items()},
            "host_ops": dict(self.host_ops),
        }


def _rank_of(trace: Trace) -> int:
    if trace.rank is not None:
        return trace.rank
    digits = "".join(ch for ch in trace.path.name.split(".")[0] if ch.isdigit())
    return int(digits) if digits else 0


def _windows(trace: Trace) -> tuple[str, pd.DataFrame]:
    kind = detect_kind(trace.events)
    if kind == "cpu" and _recorded_on_gpu(trace):
        raise TraceError(
            f"{trace.path}: only CPU events, though recorded on GPUs; "
            "profile with ProfilerActivity.CUDA"
        )
    windows = step_windows(trace.events, kind).reset_index(drop=True)
    if windows.empty:
        raise TraceError(no_steps_reason(trace.path, trace.events))
    return kind, windows


def _steps(trace: Trace, windows: pd.DataFrame, tally: Tally) -> list[StepAttribution]:
    out = []
    for i, (step, lo, hi) in enumerate(windows[["step", "start", "end"]].itertuples(index=False)):
        step_s = (hi - lo) * _US
        found = tally.causes[i]
        causes = {c: max(found.get(c, 0.0), 0.0) for c in C.ORDER if c != C.UNATTRIBUTED}
        # the remainder, exactly (rounding included), is its own row
        causes[C.UNATTRIBUTED] = step_s - sum(causes.values())
        by_unit = {c: u for c, u in tally.units[i].items() if any(v > 0 for v in u.values())}
        out.append(
            StepAttribution(
                rank=_rank_of(trace),
                step=int(step),
                start_us=float(lo),
                step_s=step_s,
                causes=causes,
                by_unit=by_unit,
                host_ops=dict(
                    sorted(tally.host_ops[i].items(), key=lambda kv: -kv[1])[:TOP_HOST_OPS]
                ),
            )
        )
    return out


def attribute_loaded(trace: Trace, probe: dict[str, Any] | None = None) -> list[StepAttribution]:
    """Every profiled step of a parsed trace, attributed; `probe` is a job's bandwidth probe
    (result.json `bandwidth`), the yardstick of its collectives where it is stricter."""
    kind, windows = _windows(trace)
    if kind == "gpu":
        tally = attribute_device(trace, windows, probe)
    else:
        tally = attribute_host(trace, windows)
    return _steps(trace, windows, tally)
