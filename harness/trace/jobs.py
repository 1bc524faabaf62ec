"""Job directories, read for the diagnosis: a job's measured record (result.json), its
analysed traces, and its traced record, cached beside its trace summaries.

`harness.trace.diagnose` takes records and never reads a job directory; the trace library
never imports the diagnosis. This module sits above both: the command line
(`python -m harness.trace`), the results table's pool and the report read jobs through it.
`why(A, B)` is `harness.trace.diagnose.why.why` of the two jobs' cached records.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.jobdir.paths import JobDir
from harness.jobdir.result import CorruptResultError, Result, read_result
from harness.models.unit_names import job_units
from harness.trace import cache
from harness.trace.diagnose import traced
from harness.trace.diagnose.attribute import StepAttribution, attribute_loaded
from harness.trace.diagnose.critical_path import CriticalPath, critical_paths
from harness.trace.diagnose.ranks import CrossRank, split_collectives
from harness.trace.diagnose.why import JobRecords, WhyError
from harness.trace.diagnose.why import check_same_point as same_point_of_records
from harness.trace.diagnose.why import why as why_records
from harness.trace.parse import TraceError, load_trace
from harness.trace.rank_files import checked_traces, every_rank_once
from harness.trace.summary import Analysis, analyse, find_traces


def read_job_result(job_dir: Path | str) -> Result:
    """The job's result.json; WhyError naming the job where it has none to read."""
    try:
        return read_result(JobDir(job_dir).result)
    except (CorruptResultError, FileNotFoundError) as e:
        raise WhyError(f"{job_dir}: no readable result.json ({e})") from e


def job_units_of(job_dir: Path | str) -> list[str] | None:
    """The job's units in execution order as its engine recorded them (result.json's
    `engine_settings.units`), None where it has none or no readable result."""
    try:
        return job_units(read_result(JobDir(job_dir).result).engine_settings)
    except (CorruptResultError, OSError):
        return None


def job_probe(job_dir: Path | str) -> dict[str, Any] | None:
    """The job's bandwidth probe (result.json metrics.bandwidth), None where it has none."""
    try:
        metrics = json.loads(JobDir(job_dir).result.read_text()).get("metrics") or {}
        value = metrics.get("bandwidth")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, dict) else None


def analyse_job(job_dir: Path | str) -> list[Analysis]:
    """Every rank's trace of the job, parsed and analysed: one file per rank, each holding
    the rank its name says (the ranks may be some of the job's: the diagnosis says which)."""
    paths = checked_traces(find_traces(job_dir))
    if not paths:
        raise TraceError(f"{job_dir}: no traces/rank<r>.json[.gz] trace files")
    analyses = [analyse(load_trace(p)) for p in paths]
    records = [{"rank": a.rank, "world_size": _world_size(a)} for a in analyses]
    every_rank_once(Path(job_dir), paths, records, all_ranks=False)
    return analyses


def _world_size(a: Analysis) -> int | None:
    world = (a.trace.metadata.get("distributedInfo") or {}).get("world_size")
    return world if isinstance(world, int) else None


def job_cross_rank(job_dir: Path | str) -> CrossRank:
    """The cross-rank split of every rank's trace of a job."""
    return split_collectives(analyse_job(job_dir))


def job_critical_paths(job_dir: Path | str) -> list[CriticalPath]:
    return critical_paths(analyse_job(job_dir), str(job_dir))


def attribute_trace(path: Path | str, probe: dict[str, Any] | None = None) -> list[StepAttribution]:
    """Every profiled step of one trace file, attributed."""
    return attribute_loaded(load_trace(path), probe)


def attribute_job(job_dir: Path | str) -> list[StepAttribution]:
    """Every rank's trace of a job directory (traces/rank<r>.json[.gz]), attributed, with
    the job's bandwidth probe as a yardstick where it recorded one."""
    paths = checked_traces(find_traces(job_dir))
    if not paths:
        raise TraceError(f"{Path(job_dir) / 'traces'}: no rank<r>.json[.gz] trace files")
    probe = job_probe(job_dir)
    return [step for p in paths for step in attribute_trace(p, probe)]


@dataclass(frozen=True)
class TracedRecord:
    """The traced record as the trace cache's pool computes it (a `cache.JobRecord`): keyed
    by the job's traces and analysis version, and by its bandwidth probe, which it reads."""

    def key(self, job_dir: Path) -> dict[str, Any]:
        probe = json.dumps(job_probe(job_dir), sort_keys=True, default=str)
        return cache.job_key(job_dir, probe=hashlib.sha1(probe.encode()).hexdigest()[:16])

    def cached(self, job_dir: Path, key: dict[str, Any]) -> bool:
        return cache.read_job_record(job_dir, traced.NAME, key) is not None

    def compute(
        self, job_dir: Path, key: dict[str, Any], analyses: list[Analysis], error: str | None
    ) -> None:
        try:
            if error is not None:
                raise TraceError(error)
            value = traced.traced_record(analyses, job_probe(job_dir))
        except TraceError as e:
            value = {"error": str(e)}
        cache.write_job_record(job_dir, traced.NAME, key, value)


RECORD = TracedRecord()
# Steps attributed another way than from the job's own traces (a test's table).
Attribute = Callable[[Path], list[StepAttribution]]


def job_traced(job_dir: Path | str) -> dict[str, Any]:
    """The job's traced record from its cache; computed (its traces parsed once, their
    summaries cached too) only where the cache is stale. {"error": ...} where the traces
    cannot be analysed."""
    job_dir = Path(job_dir)
    if not find_traces(job_dir):
        return {"error": f"{JobDir(job_dir).traces}: no rank<r>.json[.gz] trace files"}
    key = RECORD.key(job_dir)
    found = cache.read_job_record(job_dir, traced.NAME, key)
    if found is None:
        cache.job_profiles([job_dir], workers=1, record=RECORD)
        found = cache.read_job_record(job_dir, traced.NAME, key)
    return found if found is not None else {"error": f"{job_dir}: no traced record"}


def job_records(job_dir: Path | str, attribute: Attribute | None = None) -> JobRecords:
    """The job's measured and traced records; `attribute(job_dir)`: its steps attributed
    another way (tests), in place of the cached record's."""
    job_dir = Path(job_dir)
    result = read_job_result(job_dir)
    if attribute is None:
        return JobRecords(job_dir, result, job_traced(job_dir))
    record = traced.traced_record(analyse_job(job_dir), attributed=attribute(job_dir))
    return JobRecords(job_dir, result, record)


def check_same_point(job_a: Path | str, job_b: Path | str) -> None:
    """WhyError, naming the fields, where two job directories are at different grid points
    (read from their results alone)."""
    records = [JobRecords(Path(j), read_job_result(j), {}) for j in (job_a, job_b)]
    same_point_of_records(*records)


def why(
    job_a: Path | str,
    job_b: Path | str,
    attribute: Attribute | None = None,
    rank: int | None = None,
) -> dict:
    """`harness.trace.diagnose.why.why` of two job directories' records (their grid points
    checked first, before any trace is read)."""
    check_same_point(job_a, job_b)
    return why_records(job_records(job_a, attribute), job_records(job_b, attribute), rank)
