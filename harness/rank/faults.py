"""Deliberate failures, so tests can prove that a failing job becomes a result row."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from harness.config import FaultConfig
from harness.rank.fault_delay import arm_delay


class InjectedCrash(RuntimeError):
    """A rank's deliberate crash (`fault.kind=crash`, `drill=crash`)."""


def maybe_inject(fault: FaultConfig, *, rank: int, step: int, device: Any = None) -> None:
    arm_delay(fault, rank=rank, step=step, device=device)
    if fault.kind == "none" or rank != fault.rank or step != fault.step:
        return
    if fault.kind == "crash":
        raise InjectedCrash(f"injected crash: rank {rank} crashed at step {step}")
    if fault.kind == "hang":
        while True:  # the collective timeout or the job wall-clock limit must end this
            time.sleep(1.0)
    if fault.kind == "kill":  # dies the way the OOM killer or `kill -9` ends a rank
        os.kill(os.getpid(), signal.SIGKILL)
    if fault.kind == "oom":
        raise MemoryError(f"injected fault: rank {rank} ran out of memory at step {step}")
