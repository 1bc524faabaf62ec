"""A sweep runner resolves `device=auto` and counts this machine's GPUs without importing
torch where no GPU driver is present (torch would see none), and its planner's probe cache
is found without it."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config import JobConfig
from harness.engines.registry import ENGINES
from harness.placement import gpu_driver_present
from harness.plan.memory.model import estimate_memory
from harness.plan.planner import memory_case
from tests.report.test_no_torch import run_without_torch

SCRIPT = """
from harness.config import JobConfig
from harness.engines.registry import ENGINES
from harness.placement import resolved
from harness.plan.memory.model import estimate_memory
from harness.plan.planner import memory_case
from harness.validate.machine import this_machine

cfg = JobConfig(model="llama_tiny", engine=ENGINES["fsdp2"].config())
job = resolved(cfg)
print(job.device, job.backend, this_machine(cfg).gpus)
estimate_memory(memory_case(cfg))  # a probe cache hit: the cache is named without torch
"""


@pytest.mark.skipif(gpu_driver_present(), reason="a GPU driver is present: torch is asked")
def test_auto_resolves_to_the_cpu_without_importing_torch(tmp_path: Path) -> None:
    cfg = JobConfig(model="llama_tiny", engine=ENGINES["fsdp2"].config())
    estimate_memory(memory_case(cfg))  # here, with torch: fills the probe cache
    proc = run_without_torch(tmp_path, "-c", SCRIPT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["cpu", "gloo", "0"]
