"""Measured bus bandwidth from an earlier sweep's bandwidth probes, in place of the
hardware profile's datasheet figures (`python -m harness.plan calibration=<sweep dir>`)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from harness.plan.planner import Bandwidth


def measured_bandwidth(sweep_dir: Path) -> Bandwidth:
    """The median all-gather bus bandwidth of the largest messages the sweep's jobs probed,
    over single-node jobs (intra-node) and multi-node ones (inter-node)."""
    if not sweep_dir.is_dir():
        raise ValueError(f"calibration={sweep_dir} is not a directory; give a sweep directory")
    intra: list[float] = []
    inter: list[float] = []
    for path in sorted(sweep_dir.rglob("result.json")):
        try:
            probe = json.loads(path.read_text()).get("metrics", {}).get("bandwidth")
        except (OSError, ValueError):
            continue
        if not probe or not probe.get("all_gather"):
            continue
        largest = max(probe["all_gather"], key=lambda row: row["bytes"])
        (inter if probe.get("nodes", 1) > 1 else intra).append(largest["bus_gbps"])
    if not intra and not inter:
        raise ValueError(
            f"calibration={sweep_dir} holds no bandwidth probe; run the sweep with "
            "probe_bandwidth=true (the sweeps' default) first"
        )
    return Bandwidth(
        intra_node_bus_gbps=statistics.median(intra) if intra else None,
        inter_node_bus_gbps=statistics.median(inter) if inter else None,
        source=f"{len(intra) + len(inter)} probes in {sweep_dir}",
    )
