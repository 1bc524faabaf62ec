"""Pre-flight checks: refuse a config that cannot work before any process starts.

Every message names the field and says what to change. The checks come in groups, one
module each: choices (fields with a few values), ranges (numbers), engine (a label and
its options), device_ranges and shapes (the hardware profile's numbers and lists), model
(what needs the model's shapes), torch_version (the torch a plan models) and machine (what
this machine can run, for a local launch).
"""

from __future__ import annotations

from dataclasses import replace

from harness.config import JobConfig
from harness.validate.choices import choice_errors
from harness.validate.device_ranges import device_range_errors
from harness.validate.engine import engine_errors, engine_job_errors
from harness.validate.fields import unknown_field_errors
from harness.validate.machine import Machine, machine_errors
from harness.validate.model import SHARDED_BYTES_PER_PARAM, model_errors
from harness.validate.ranges import range_errors, repeat_errors
from harness.validate.shapes import device_spec_errors
from harness.validate.torch_version import torch_version_errors

__all__ = [
    "SHARDED_BYTES_PER_PARAM",
    "Machine",
    "repeat_errors",
    "unknown_field_errors",
    "validation_errors",
]


def validation_errors(
    cfg: JobConfig, *, machine: Machine | None = None, local_devices: int | None = None
) -> list[str]:
    """All problems with `cfg`; empty when it can run.

    `machine`: the machine whose processes the job's ranks would be (a local launch), to
    check GPUs, cores and memory against; None for a job that runs elsewhere (SLURM) or a
    plan. `local_devices`: the number of GPUs here, where that is all that is known.
    """
    if local_devices is not None:
        machine = replace(machine or Machine(), gpus=local_devices)
    errors = [
        *choice_errors(cfg),
        *range_errors(cfg),
        *engine_errors(cfg.engine),
        *engine_job_errors(cfg),
        *device_range_errors(cfg.device_spec),
        *device_spec_errors(cfg.device_spec),
        *torch_version_errors(cfg),
    ]
    if errors:  # the model and the machine are judged on a config that is whole
        return errors
    return [*model_errors(cfg), *machine_errors(cfg, machine)]
