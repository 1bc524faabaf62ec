"""The figures a prediction rests on, each with its origin: a datasheet or publication the
hardware profile names, or a calibration measured on the user's hardware that replaced it."""

from __future__ import annotations

from typing import Any

from harness.config import DeviceSpec, JobConfig
from harness.plan.calibrate.calibration import Calibration

# The profile's figures each prediction uses; the network's are replaced by a calibration.
COMPUTE_CONSTANTS = ("peak_tflops", "memory_gbps", "memory_efficiency", "kernel_floor_us",
                     "gemm_efficiency", "gemm_tile", "sm_count", "attention_tflops",
                     "launch_us", "hook_us", "nccl_sms")  # fmt: skip
NETWORK_CONSTANTS = ("nvlink_channels", "nvlink_channel_gbps", "nics_per_node", "nic_gbps",
                     "nic_efficiency", "node_decline_per_doubling", "base_latency_us",
                     "nvlink_step_us", "net_step_us", "net_overhead_us", "ll_max_gbps",
                     "all_gather_bus_gbps", "reduce_scatter_bus_gbps",
                     "bus_measured_nodes")  # fmt: skip


def constants(cfg: JobConfig, measured: Calibration | None = None) -> dict[str, dict[str, Any]]:
    """Each figure the prediction rests on: its value and whether it was measured (and
    where) or comes from a datasheet or publication (the profile's named source)."""
    spec = cfg.device_spec
    out: dict[str, dict[str, Any]] = {}

    def source(key: str) -> str:
        named = spec.sources.get(key) or spec.sources.get(f"network.{key}")
        if named is None:  # sources name the first field of a group
            named = _group_source(spec, key)
        return f"datasheet/publication: {named}" if named else "no source named"

    for key in COMPUTE_CONSTANTS:
        out[key] = {"value": getattr(spec, key), "origin": source(key)}
    run = measured.for_world(cfg.gpus) if measured else None
    for key in NETWORK_CONSTANTS:
        value = getattr(spec.network, key)
        if run is not None:
            origin = (f"replaced by the calibration: {run.origin} measured these collectives' "
                      f"times on {run.world_size} ranks; this figure is not used")  # fmt: skip
        else:
            origin = source(key)
        out[f"network.{key}"] = {"value": value, "origin": origin}
    outside = measured.outside_allocator_bytes if measured else None
    default = int(spec.outside_allocator_gb * 2**30)
    out["overhead_bytes"] = {
        "value": outside if outside is not None else default,
        "origin": f"measured: {measured.source}" if outside is not None and measured
        else f"not measured: {source('outside_allocator_gb')}" if default
        else "not measured: 0 (memory outside the caching allocator)",
    }  # fmt: skip
    return out


# Fields whose source the profile gives once, under the first field of their group.
_GROUPS = {
    "gemm_tile": "gemm_tile",
    "nvlink_channel_gbps": "network.nvlink_channels",
    "nic_gbps": "network.nics_per_node",
    "nvlink_step_us": "network.base_latency_us",
    "net_step_us": "network.base_latency_us",
    "attention_seq": "attention_tflops",
    "reduce_scatter_bus_gbps": "network.all_gather_bus_gbps",
    "bus_measured_nodes": "network.all_gather_bus_gbps",
}


def _group_source(spec: DeviceSpec, key: str) -> str | None:
    group = _GROUPS.get(key)
    return spec.sources.get(group) if group else None
