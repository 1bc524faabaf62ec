"""A job's traced record: every rank's profiled steps attributed, per rank and per step,
with the exposed wait for a late rank moved into its own cause (the cross-rank skew), the
late arrivals at collectives, and what the cross-rank split had to do without.

It is computed from the job's analysed traces (records, never a job directory), JSON-ready,
and cached beside the job's trace summaries under the same key (`harness.trace.cache`), so
`why` of two jobs and the report read it without parsing a trace again. No torch.
"""

from __future__ import annotations

from typing import Any

from harness.trace.diagnose.attribute import StepAttribution, attribute_loaded
from harness.trace.diagnose.ranks import exposed_skew, late_arrivals, split_collectives, with_skew
from harness.trace.summary import Analysis

NAME = "attribution"  # the record's name in the job's trace cache


def traced_record(
    analyses: list[Analysis],
    probe: dict[str, Any] | None = None,
    attributed: list[StepAttribution] | None = None,
) -> dict[str, Any]:
    """The record of a job whose ranks' traces are `analyses`; `probe` is its bandwidth
    probe (result.json `metrics.bandwidth`), the yardstick of its collectives where it is
    stricter; `attributed`: steps attributed another way, in place of the traces' own."""
    cross = split_collectives(analyses)
    skew = {a.rank: exposed_skew(a, cross.splits) for a in analyses}
    if attributed is None:
        attributed = [step for a in analyses for step in attribute_loaded(a.trace, probe)]
    steps = [with_skew(s, skew.get(s.rank, {}).get(s.step, {})) for s in attributed]
    return {
        "steps": [s.to_dict() for s in steps],
        "late": late_arrivals(cross),
        "notes": list(cross.warnings),
    }


def steps_of(record: dict[str, Any]) -> list[StepAttribution]:
    """The record's attributed steps, every rank's."""
    return [StepAttribution(**step) for step in record.get("steps", [])]
