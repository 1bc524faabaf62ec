"""What a job records of other load on its machine: /proc readings on CPU, NVML samples on
GPU (a stand-in NVML here), and the report's verdict on a point's runs."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from harness.rank import host_usage, nvml_watch
from harness.rank.nvml_watch import GpuWatch
from harness.report.run_conditions import interference_cell, uneven_interference


def test_node_busy_time_counts_all_but_idle_and_iowait(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 20 30 5000 70 4 6 10 50 0\ncpu0 1 2 3 4 5 6 7 8 9 0\n")
    ticks = host_usage._ticks_per_s()
    assert host_usage.node_busy_s(stat) == pytest.approx((100 + 20 + 30 + 4 + 6 + 10) / ticks)
    stat.write_text("intr 1 2 3\n")
    assert host_usage.node_busy_s(stat) is None
    assert host_usage.node_busy_s(tmp_path / "absent") is None


def test_own_cpu_time_grows_with_work() -> None:
    before = host_usage.own_cpu_s()
    sum(i * i for i in range(2_000_000))
    assert host_usage.own_cpu_s() > before


class FakeNvml(types.SimpleNamespace):
    """The few pynvml calls the watch makes, answering from lists of samples."""

    NVML_CLOCK_SM = 1

    def __init__(self, clocks: list[int], masks: list[int], pids: list[list[int]]) -> None:
        super().__init__(clocks=clocks, masks=masks, pids=pids)

    def nvmlInit(self) -> None:  # noqa: N802
        pass

    def nvmlDeviceGetClockInfo(self, handle: Any, kind: int) -> int:  # noqa: N802
        return self.clocks.pop(0)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:  # noqa: N802
        return self.masks.pop(0)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:  # noqa: N802
        return [types.SimpleNamespace(pid=p, usedGpuMemory=2**30) for p in self.pids.pop(0)]


def watch_with(monkeypatch: pytest.MonkeyPatch, fake: FakeNvml, own: set[int]) -> GpuWatch:
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(nvml_watch, "_handle", lambda nvml, index: "handle")
    return GpuWatch.open(0, frozenset(own), ranks_here=1)


def test_gpu_watch_records_clocks_throttling_and_other_processes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeNvml([1980, 1410, 1980], [0x1, 0x4, 0x0], [[10], [10, 77], [10]])
    watch = watch_with(monkeypatch, fake, {10, 11})
    for _ in range(3):
        watch.sample()
    summary = watch.summary()
    assert summary["sm_clock_mhz_min"] == 1410 and summary["sm_clock_mhz_median"] == 1980
    assert nvml_watch.throttle_names(summary["throttle_mask"]) == ["gpu_idle", "sw_power_cap"]
    assert summary["other_processes"] == 1 and summary["other_memory_bytes"] == 2**30


def test_in_another_pid_namespace_the_jobs_own_ranks_are_counted_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # NVML reports host PIDs; none is ours, so one process (ours) per device is discounted.
    fake = FakeNvml([1980, 1980], [0, 0], [[4242], [4242, 5151]])
    watch = watch_with(monkeypatch, fake, {10})
    watch.sample()
    assert watch.summary()["other_processes"] == 0
    watch.sample()
    assert watch.summary()["other_processes"] == 1


def test_without_pynvml_the_watch_says_why_and_records_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    watch = GpuWatch.open(0, frozenset({1}), ranks_here=1)
    watch.sample()
    assert watch.summary() == {"unavailable": "pynvml is not installed (pip install nvidia-ml-py)"}


def test_uneven_gpu_conditions_are_named() -> None:
    def job(**gpu: Any) -> dict[str, Any]:
        base = {"sm_clock_mhz_median": 1980.0, "other_processes": 0, "throttle_reasons": []}
        return {"interference": {"other_cpu_share": 0.01, "gpu": {**base, **gpu}}}

    assert uneven_interference([job(), job(throttle_reasons=["gpu_idle"])]) is None
    reason = uneven_interference(
        [
            job(),
            job(
                other_processes=2,
                sm_clock_mhz_median=1500.0,
                throttle_reasons=["sw_thermal_slowdown"],
            ),
        ]  # fmt: skip
    )
    assert reason == (
        "other processes on the GPUs in some runs only (up to 2); median SM clock 1500 to "
        "1980 MHz; throttled (sw_thermal_slowdown) in some runs only"
    )
    assert uneven_interference([job(), {"interference": None}]) is None  # one record only
    assert "SM 1980 MHz" in interference_cell(job())
    assert interference_cell({"interference": {"gpu": {"unavailable": "x"}}}) == "GPU not watched"


def test_the_job_record_reduces_cpu_and_gpu_readings_across_ranks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One gloo rank stands for the job: the record's arithmetic and its GPU fields."""
    import torch
    import torch.distributed as dist

    from harness.rank.interference import Window, reduce_interference

    fake = FakeNvml([1980, 1500], [0x0, 0x20], [[10], [10, 77]])
    watch = watch_with(monkeypatch, fake, {10})
    window = Window.start(watch)
    window.after_step()
    window.stop()
    window.wall_s, window.node_busy_delta_s, window.own_delta_s = 2.0, 3.0, 1.0
    monkeypatch.setattr(host_usage, "node_cpus", lambda: 2)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        record = reduce_interference(window, torch.device("cpu"), local_rank=0)
    finally:
        dist.destroy_process_group()
    assert record["cpus"] == 2 and record["own_cpu_s"] == 1.0
    assert record["other_cpu_s"] == 2.0 and record["other_cpu_share"] == 0.5  # 2 s of 2x2 s
    assert record["gpu"] == {
        "sm_clock_mhz_min": 1500.0, "sm_clock_mhz_median": 1740.0, "sm_clock_mhz_max": 1980.0,
        "other_processes": 1, "other_memory_bytes": 2**30,
        "throttle_reasons": ["sw_thermal_slowdown"],
    }  # fmt: skip
