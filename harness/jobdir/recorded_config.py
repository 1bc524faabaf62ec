"""A recorded config as it reads today: the one reading of a result.json's config that
resume, the results table and the report share.

A result keeps the config its job ran with. Fields added to the config since then are read
with the value such jobs ran with, an engine recorded by its bare label is the registry's
config of that label, and nested mappings are flattened to dotted names (`engine.name`).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from harness.config import PLANNER, RUNNER, SWEEP, fields_living
from harness.engines.registry import ENGINES
from harness.jobdir.result import CorruptResultError, Result

# Fields added after results were first recorded, with the value those results ran with:
# an older result.json without the field is read as having it (resume, the report).
FIELDS_ADDED_LATER = {
    "model_impl": "native",
    "engine.memory_budget_gb": 0.0,
    "engine.buffer_plan": "auto",
    "fault.where": "",
    "fault.ms": 0.0,
    # the profiled pass never feeds the timings: an older result stands for a new request
    "profile.cuda_sync_events": True,
    "repeat": 0,
    "repeats": 1,
    "memory_snapshot": False,
}

# Config fields that cannot change a job's measurements: those whose lifetime
# (`harness.config`, marked on each field) is not MEASURED. Resume ignores them when it compares
# a stored result's config with the requested one, and the report never tells jobs apart by
# them. Everything else in the config counts. device_spec holds the planner's figures: they
# change predictions, never a measurement. repeats says how many runs the sweep asks for: a
# run already measured stands whatever their number (`repeat`, which run a job is, is in its
# directory's name and counts).
RESULT_NEUTRAL_FIELDS = fields_living(RUNNER, SWEEP, PLANNER)


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"engine": {"name": "x"}} -> {"engine.name": "x"}; an empty mapping stays a leaf."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def is_neutral(field: str) -> bool:
    """Whether a (dotted) config field cannot change a measurement."""
    return field.split(".")[0] in RESULT_NEUTRAL_FIELDS


def engine_of(result: Result) -> dict[str, Any]:
    """The job's engine config. One recorded as a bare label (`"engine": "yafsdp"`, in an
    older or hand-written result) is the registry's config of that label, so that the job
    is matched with the others at its grid point; a label the registry lacks is refused."""
    label = result.config.get("engine")
    if not isinstance(label, str):
        return result.engine
    if label not in ENGINES:
        raise CorruptResultError(
            f"config.engine={label!r} is no engine label of harness.engines.registry "
            f"({', '.join(ENGINES)}); write the label of the engine the job ran, or "
            "config.engine as the object a job records (name, label and settings)"
        )
    return asdict(ENGINES[label].config())


def recorded_config(result: Result) -> dict[str, Any]:
    """The result's config, flat, as it reads today (see the module's docstring)."""
    config = result.config
    if "engine" in config:
        config = {**config, "engine": engine_of(result)}
    return {**FIELDS_ADDED_LATER, **flatten(config)}
