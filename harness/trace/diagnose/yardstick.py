"""What a collective's bytes need: the yardstick a collective kernel is measured against.

A collective needs at least the time of the fastest collective of the same kind and size
in the same trace, and at most what the job's bandwidth probe (result.json `bandwidth`)
measured at that size; the smaller of the two is the yardstick. What a kernel runs
beyond it is time its bytes did not need. Without bytes (gloo spans carry none) nothing
is measured against anything. No torch.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

# Kineto's dtype names (c10::ScalarType) -> bytes per element
_ITEM_BYTES = {
    "Double": 8, "Long": 8, "ComplexFloat": 8, "ComplexDouble": 16,
    "Float": 4, "Int": 4,
    "Half": 2, "BFloat16": 2, "Short": 2,
    "Byte": 1, "Char": 1, "Bool": 1, "Float8_e4m3fn": 1, "Float8_e5m2": 1,
    "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1,
}  # fmt: skip
_KINDS = {"allgather": "all_gather", "reducescatter": "reduce_scatter", "allreduce": "all_reduce"}
_KIND_WORD = re.compile("|".join(_KINDS))


def collective_kind(name: str) -> str:
    """'all_gather', 'reduce_scatter' or 'all_reduce' named in a kernel, span or collective
    name ('ncclDevKernel_AllGather_RING_LL', 'gloo:all_reduce', '_allgather_base'), else
    'other'."""
    m = _KIND_WORD.search(re.sub(r"[^a-z]", "", name.lower()))
    return _KINDS[m.group(0)] if m else "other"


def collective_bytes(collectives: pd.DataFrame) -> np.ndarray:
    """The unsharded bytes of each collective row: the larger of its input and output
    element counts, times its element size; NaN where a count or the dtype is unknown."""
    item = collectives["dtype"].map(_ITEM_BYTES).to_numpy(dtype=float)
    count = np.maximum(collectives["in_nelems"], collectives["out_nelems"]).to_numpy(float)
    return np.where(count > 0, count * item, np.nan)


def probe_seconds(probe: dict[str, Any] | None, kind: str, nbytes: np.ndarray) -> np.ndarray:
    """The probe's time for `kind` at each size, interpolated between its sizes (and
    scaled by bytes beyond its largest); NaN without a probe of that kind."""
    rows = (probe or {}).get(kind)
    out = np.full(nbytes.size, np.nan)
    if not isinstance(rows, list) or not rows:
        return out
    table = sorted((float(r["bytes"]), float(r["seconds"])) for r in rows)
    sizes, seconds = np.array([b for b, _ in table]), np.array([s for _, s in table])
    known = ~np.isnan(nbytes)
    interp = np.interp(nbytes[known], sizes, seconds)
    beyond = nbytes[known] > sizes[-1]
    interp[beyond] = seconds[-1] * nbytes[known][beyond] / sizes[-1]
    out[known] = interp
    return out


def needed_us(
    kind: np.ndarray, nbytes: np.ndarray, dur: np.ndarray, probe: dict[str, Any] | None = None
) -> np.ndarray:
    """The yardstick of each collective kernel (microseconds); the kernel's own duration
    where its bytes are unknown, so that nothing is called slow without evidence."""
    frame = pd.DataFrame({"kind": kind, "bytes": nbytes, "dur": dur})
    fastest = frame.groupby(["kind", "bytes"])["dur"].transform("min").to_numpy(float)
    need = np.where(np.isnan(nbytes), dur, fastest)
    for k in np.unique(kind):
        mine = kind == k
        probed = probe_seconds(probe, str(k), nbytes[mine]) * 1e6
        need[mine] = np.fmin(need[mine], probed)
    return np.minimum(need, dur)
