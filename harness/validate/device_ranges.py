"""The hardware profile's numbers (`device_spec`) in their ranges, before any plan reads
them: a negative peak gives a negative MFU, an efficiency above 1 a device faster than its
datasheet, `nic_gbps=0` a division by zero. 0 stands for "unknown" (the planner then
predicts memory only), except where the network is known: then its NICs must be too.

Comparisons are written `not (...)` so that a NaN is refused with the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.config import DeviceSpec, NetworkSpec

FIX = (
    "take the figure from the device's datasheet "
    "(see sweeps/hardware/a100_80gb.yaml and its sources)"
)


UNKNOWN = " (or 0: unknown)"


@dataclass(frozen=True)
class Range:
    """`low < value <= high` (`low <= value` where `low_included`); 0 always passes where
    `zero_is_unknown`."""

    what: str
    low: float = 0.0
    high: float = math.inf
    low_included: bool = False
    zero_is_unknown: bool = True

    def holds(self, value: float) -> bool:
        if self.zero_is_unknown and value == 0:
            return True
        above = value >= self.low if self.low_included else value > self.low
        return bool(above and value <= self.high and math.isfinite(value))

    def says(self) -> str:
        low = f"{self.low:g} or more" if self.low_included else f"more than {self.low:g}"
        span = low if self.high == math.inf else f"{low} and at most {self.high:g}"
        return f"{span}{UNKNOWN if self.zero_is_unknown else ''}"


DEVICE = {
    "peak_tflops": Range("dense tensor-core TFLOP/s"),
    "memory_gbps": Range("device memory bandwidth in GB/s"),
    "sm_count": Range("the device's SMs", low=1, low_included=True),
    "gemm_efficiency": Range("the fraction of peak a large GEMM reaches", high=1.0),
    "memory_efficiency": Range("the fraction of memory bandwidth kernels reach", high=1.0),
    "kernel_floor_us": Range("the shortest kernel in us", low_included=True),
    "launch_us": Range("host time to launch one op in us", low_included=True),
    "hook_us": Range("host time of one engine hook in us", low_included=True),
    "nccl_sms": Range("SMs NCCL's kernels hold", low_included=True),
}
NETWORK = {
    "nvlink_channels": Range("ring channels inside a node", low=1, low_included=True),
    "nvlink_channel_gbps": Range("GB/s of one ring channel"),
    "nics_per_node": Range("NICs of one node", low=1, low_included=True),
    "nic_gbps": Range("the line rate of one NIC in Gb/s"),
    "nic_efficiency": Range("the fraction of the line rate NCCL achieves", high=1.0),
    "node_decline_per_doubling": Range(
        "bus bandwidth lost per doubling of nodes", high=0.999, low_included=True
    ),
    "decline_from_nodes": Range(
        "nodes before the decline", low=1, low_included=True, zero_is_unknown=False
    ),
    "net_overhead_us": Range("us per step once a ring crosses nodes", low_included=True),
    "ll128_channel_gbps": Range("GB/s of one LL128 channel", low_included=True),
}
# Where the network is known (NVLink channels given), a second node needs its NICs.
KNOWN_NETWORK_NEEDS = ("nics_per_node", "nic_gbps", "nic_efficiency")
NETWORK_LISTS = ("base_latency_us", "nvlink_step_us", "net_step_us", "ll_max_gbps")


def device_range_errors(spec: DeviceSpec) -> list[str]:
    errors = [
        _error(f"device_spec.{name}", getattr(spec, name), rule)
        for name, rule in DEVICE.items()
        if not rule.holds(getattr(spec, name))
    ]
    if spec.sm_count > 0 and spec.nccl_sms >= spec.sm_count:
        errors.append(
            f"device_spec.nccl_sms={spec.nccl_sms} must be fewer than device_spec.sm_count="
            f"{spec.sm_count} (NCCL holds some of the SMs, not all); {FIX}"
        )
    return errors + _network_errors(spec.network)


def _network_errors(net: NetworkSpec) -> list[str]:
    errors = []
    for name, rule in NETWORK.items():
        value = getattr(net, name)
        if net.known() and name in KNOWN_NETWORK_NEEDS and value == 0:
            errors.append(
                f"device_spec.network.{name}=0 must be {rule.says().removesuffix(UNKNOWN)}"
                f" where the network is known (nvlink_channels={net.nvlink_channels}): without "
                f"{rule.what} no job over one node can be priced; {FIX}"
            )
        elif not rule.holds(value):
            errors.append(_error(f"device_spec.network.{name}", value, rule))
    for name in NETWORK_LISTS:
        values = getattr(net, name)
        if not all(math.isfinite(v) and v >= 0 for v in values):
            errors.append(
                f"device_spec.network.{name}={values} must hold finite figures, 0 or more "
                f"(NCCL's per-protocol times and rates); {FIX}"
            )
    return errors


def _error(field: str, value: float, rule: Range) -> str:
    return f"{field}={value} must be {rule.says()}: it is {rule.what}; {FIX}"
