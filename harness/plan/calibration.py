"""What an earlier sweep measured, in place of the hardware profile's figures
(`python -m harness.plan calibration=<sweep dir>`): bus bandwidth from the jobs' bandwidth
probes, and the device memory they held outside the caching allocator."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from harness.plan.planner import Calibration


def calibration_from(sweep_dir: Path) -> Calibration:
    """The median all-gather bus bandwidth of the largest messages the sweep's jobs probed,
    over single-node jobs (intra-node) and multi-node ones (inter-node); and the most
    device memory any of its GPU jobs held outside the allocator (a fit is decided on it,
    so the largest, not a typical one)."""
    if not sweep_dir.is_dir():
        raise ValueError(f"calibration={sweep_dir} is not a directory; give a sweep directory")
    intra: list[float] = []
    inter: list[float] = []
    outside: list[int] = []
    for path in sorted(sweep_dir.rglob("result.json")):
        metrics = _metrics(path)
        if metrics.get("device_memory_outside_allocator_bytes") is not None:
            outside.append(int(metrics["device_memory_outside_allocator_bytes"]))
        probe = metrics.get("bandwidth")
        if not probe or not probe.get("all_gather"):
            continue
        largest = max(probe["all_gather"], key=lambda row: row["bytes"])
        (inter if probe.get("nodes", 1) > 1 else intra).append(largest["bus_gbps"])
    if not intra and not inter and not outside:
        raise ValueError(
            f"calibration={sweep_dir} holds no bandwidth probe and no GPU memory figure; run "
            "the sweep with probe_bandwidth=true (the sweeps' default) first"
        )
    return Calibration(
        intra_node_bus_gbps=statistics.median(intra) if intra else None,
        inter_node_bus_gbps=statistics.median(inter) if inter else None,
        outside_allocator_bytes=max(outside) if outside else None,
        source=f"{len(intra) + len(inter)} probes, {len(outside)} GPU memory figures "
        f"in {sweep_dir}",
    )


def _metrics(path: Path) -> dict[str, Any]:
    try:
        metrics = json.loads(path.read_text()).get("metrics")
    except (OSError, ValueError, AttributeError):
        return {}
    return metrics if isinstance(metrics, dict) else {}
