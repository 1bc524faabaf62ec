"""What `torch.cuda._sleep(cycles)` spins per second on a GPU: its cycles are the SM
clock's, which differs between cards and with their clocks, so a delay of a given time on
the device is measured, not assumed."""

from __future__ import annotations

import torch

CALIBRATION_CYCLES = 50_000_000  # tens of milliseconds at any current clock


def cycles_per_second(device: torch.device) -> float:
    """Spin `CALIBRATION_CYCLES` between two CUDA events on `device`'s current stream."""
    with torch.cuda.device(device):
        torch.cuda._sleep(CALIBRATION_CYCLES // 10)  # wake the clocks
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(CALIBRATION_CYCLES)
        end.record()
        torch.cuda.synchronize(device)
    return CALIBRATION_CYCLES / (start.elapsed_time(end) / 1e3)
