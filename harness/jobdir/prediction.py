"""The per-job `prediction.json`: what the planner predicted for a job, written once by the
job when it starts (before its ranks), read by the results table and the report (no torch).

A job directory holds three records: what was measured (`result.json`), what was predicted
(this file) and what its traces say (`trace_cache/`, harness.trace.cache). The prediction is
the planner's row for the job as its ranks run it, and, on a yafsdp job, the planner's lines
saying why each baseline at its grid point is predicted slower (`why`, the words of
`python -m harness.plan --why`), so that the report prints stored lines and never plans.

`memory_budget_bytes` is the yafsdp memory budget the prediction was planned with; the rank
records the budget its engine was built with (result.json `engine_settings`), and the report
says where they differ (a GPU's free memory at build, which the job cannot know beforehand).

Older job directories have no prediction.json: their result.json `metrics.predicted` (the
same row, planned by rank 0 after training) stands in for it, without why-lines.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from harness.jobdir.result import write_json_atomic

PREDICTION_FILE = "prediction.json"
SCHEMA = "yafsdp-bench.prediction/1"
# The planner's terms kept for a job: the report's predicted columns and its why blocks.
TERMS = ("peak_memory_bytes", "memory_bytes_by_class", "fits", "iteration_time_s",
         "compute_s", "exposed_comm_s", "other_s", "stall_s", "comm_s",
         "tokens_per_s_per_device", "mfu", "breakdown", "mechanisms", "waits")  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """The planner's prediction for one job; `error` says why there is none."""

    terms: dict[str, Any] = field(default_factory=dict)  # TERMS of the planner's row
    memory_budget_bytes: int | None = None  # yafsdp: the budget the memory was planned with
    budget_source: str = ""  # where that budget came from, in words
    # yafsdp: baseline label -> the lines saying why its predicted step differs
    why: dict[str, list[str]] = field(default_factory=dict)
    error: str | None = None
    schema: str = SCHEMA

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Prediction:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def as_metric(self) -> dict[str, Any]:
        """The form result.json's `metrics.predicted` has (the terms, or the error), plus the
        stored why-lines and the budget: what the report's predicted columns read."""
        if self.error is not None:
            return {"error": self.error}
        return {**self.terms, "why": self.why, "memory_budget_bytes": self.memory_budget_bytes}


def prediction_path(job_dir: Path | str) -> Path:
    return Path(job_dir) / PREDICTION_FILE


def write_prediction(job_dir: Path | str, prediction: Prediction) -> Path:
    path = prediction_path(job_dir)
    write_json_atomic(path, prediction.to_dict())
    return path


def read_prediction(job_dir: Path | str) -> Prediction | None:
    """The job's prediction; None where it has none (an older job) or it cannot be read."""
    try:
        data = json.loads(prediction_path(job_dir).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return None
    try:
        return Prediction.from_dict(data)
    except TypeError:
        return None
