"""The torch version a plan models (`torch_version`, the planner's only: a job runs the
installed torch). The planner reads each engine's streams from torch 2.1 on (FSDP1's are
the same from 2.1 to 2.13, `harness.plan.time.streams`); FSDP2's `fully_shard` is not in
torch 2.2 or earlier (it was added in 2024, and announced as a prototype with 2.4; the
published preset plans it at 2.3, the torch of the YaFSDP runs it stands beside), so an
older version would be planned as if it had engines it lacks."""

from __future__ import annotations

import re

from harness.config import JobConfig

PLANNED_FROM = (2, 1)  # the oldest torch whose engine code the planner models
FSDP2_FROM = (2, 3)  # the oldest torch FSDP2 is planned at (none in 2.2 or earlier)
RUNS_FROM = "2.7"  # what a job itself needs (pyproject.toml)


def parse_version(text: str) -> tuple[int, int]:
    """(major, minor) of a version string such as '2.3', '2.13.0+cpu' or '2.8.0a0'."""
    found = re.match(r"\s*(\d+)\.(\d+)", text)
    if not found:
        raise ValueError(
            f"torch_version={text!r} is not a version; give major.minor, e.g. torch_version=2.3"
        )
    return int(found.group(1)), int(found.group(2))


def torch_version_errors(cfg: JobConfig) -> list[str]:
    """A version that is not one, or one the planner cannot model for this engine."""
    if not cfg.torch_version:  # the installed torch
        return []
    try:
        version = parse_version(cfg.torch_version)
    except ValueError as e:
        return [str(e)]
    given = f"torch_version={cfg.torch_version}"
    if version < PLANNED_FROM:
        return [
            f"{given} is older than any torch the planner models: it reads the engines' "
            f"streams from torch {_text(PLANNED_FROM)} on (a job itself needs {RUNS_FROM} or "
            f"later); give torch_version={_text(PLANNED_FROM)} or later, or leave it empty "
            "for the installed torch"
        ]
    if cfg.engine.name == "fsdp2" and version < FSDP2_FROM:
        return [
            f"{given} has no FSDP2, so engine={cfg.engine.label} cannot be planned at it "
            f"(fully_shard is not in torch 2.2 or earlier); plan FSDP2 at torch_version="
            f"{_text(FSDP2_FROM)} or later, or compare with engine=fsdp1"
        ]
    return []


def _text(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"
