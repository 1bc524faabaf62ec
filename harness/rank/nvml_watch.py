"""The state of this rank's GPU over the timed steps, through NVML (`pynvml`, which
`torch.cuda`'s own clock and process queries use too): SM clock, throttle reasons, and
processes on the device that are not this job's. Without pynvml, or where NVML refuses, the
watch says why and records nothing else; it never fails a job.

Processes: NVML names them by host PID. Inside a container whose PID namespace hides the
host's, none of them matches this job's PIDs, and NVML lists them in no promised order: the
number of other processes is still known (the listed ones less this job's ranks on the
device, `ranks_here`), but not which of them are ours, so their memory is not recorded
(`other_memory_bytes` None, `pid_namespace` "foreign").
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

# NVML's clocks-event (throttle) reason bits, by name.
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def _handle(nvml: Any, device_index: int) -> Any:
    """NVML's handle of torch's device `device_index` (by PCI bus id: torch's index is
    relative to CUDA_VISIBLE_DEVICES, NVML's is not)."""
    import torch

    props = torch.cuda.get_device_properties(device_index)
    bus = getattr(props, "pci_bus_id", None)
    if bus is not None:
        domain = getattr(props, "pci_domain_id", 0)
        dev = getattr(props, "pci_device_id", 0)
        return nvml.nvmlDeviceGetHandleByPciBusId(f"{domain:08X}:{bus:02X}:{dev:02X}.0")
    return nvml.nvmlDeviceGetHandleByIndex(device_index)


@dataclass
class GpuWatch:
    """Samples of one device; `unavailable` says why there are none."""

    own_pids: frozenset[int]
    ranks_here: int
    nvml: Any = None
    handle: Any = None
    unavailable: str | None = None
    sm_clocks_mhz: list[float] = field(default_factory=list)
    throttle_mask: int = 0
    other_processes: int = 0
    other_memory_bytes: int | None = 0  # None: other processes' memory not told from ours

    @classmethod
    def open(cls, device_index: int, own_pids: frozenset[int], ranks_here: int) -> GpuWatch:
        watch = cls(own_pids, ranks_here)
        try:
            import pynvml
        except ImportError:
            watch.unavailable = "pynvml is not installed (pip install nvidia-ml-py)"
            return watch
        try:
            pynvml.nvmlInit()
            watch.nvml, watch.handle = pynvml, _handle(pynvml, device_index)
        except Exception as e:  # NVML missing or refusing: a note, never a failed job
            watch.unavailable = f"NVML: {type(e).__name__}: {e}"
        return watch

    def sample(self) -> None:
        if self.handle is None:
            return
        nvml, h = self.nvml, self.handle
        try:
            self.sm_clocks_mhz.append(float(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)))
            reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or (
                nvml.nvmlDeviceGetCurrentClocksThrottleReasons
            )
            self.throttle_mask |= int(reasons(h))
            self._count_others(nvml.nvmlDeviceGetComputeRunningProcesses(h))
        except Exception as e:
            self.unavailable = f"NVML sampling stopped: {type(e).__name__}: {e}"
            self.handle = None

    def _count_others(self, processes: list[Any]) -> None:
        pids = [int(p.pid) for p in processes]
        memory = {int(p.pid): int(p.usedGpuMemory or 0) for p in processes}
        if self.own_pids & set(pids):
            others = [p for p in pids if p not in self.own_pids]
            self.other_processes = max(self.other_processes, len(others))
            if self.other_memory_bytes is not None:
                held = sum(memory[p] for p in others)
                self.other_memory_bytes = max(self.other_memory_bytes, held)
            return
        # Another PID namespace: our ranks are listed under host PIDs we cannot match, so
        # only how many others there are is known, not which (nor their memory).
        self.other_processes = max(self.other_processes, len(pids) - self.ranks_here)
        self.other_memory_bytes = None

    def summary(self) -> dict[str, Any]:
        """This rank's record (the job's is reduced across ranks by harness.rank.interference)."""
        if not self.sm_clocks_mhz:
            return {"unavailable": self.unavailable or "no sample"}
        clocks = self.sm_clocks_mhz
        return {
            "sm_clock_mhz_min": min(clocks),
            "sm_clock_mhz_median": statistics.median(clocks),
            "sm_clock_mhz_max": max(clocks),
            "throttle_mask": self.throttle_mask,
            "other_processes": self.other_processes,
            "other_memory_bytes": self.other_memory_bytes,
            **({"pid_namespace": "foreign"} if self.other_memory_bytes is None else {}),
            "samples": len(clocks),
        }


def throttle_names(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
