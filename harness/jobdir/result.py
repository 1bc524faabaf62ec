"""The per-job `result.json`: its schema, atomic writing and careful reading (no torch).

Layout (schema_version 1):
    schema_version, status (ok|oom|failed|timeout|invalid|interrupted), error (str|None),
    started_at, ended_at  when the job's attempt ran (UTC, ISO 8601; absent in older results),
    round    the runner invocation it ran in (harness.jobdir.rounds; absent in older results),
    config   the resolved JobConfig as a dict (engine is a dict with name and label),
    env      torch, cuda, nccl, backend, device_name, device_count, world_size, host,
             git_revision, threads_per_rank,
    metrics  step_times_s, iteration_time_s (median), iteration_time_p10_s,
             iteration_time_p90_s, tokens_per_s_per_device, tflops_per_device, mfu,
             peak_flops_per_device, peak_flops_source, flops_per_token,
             peak_memory_allocated_bytes, peak_memory_reserved_bytes, peak_rss_bytes,
             peak_rss_scope ("timed steps", or "process lifetime" where the OS cannot
             restart the high-water mark), build_peak_memory_allocated_bytes,
             build_peak_memory_reserved_bytes, num_alloc_retries, num_ooms,
             device_memory_outside_allocator_bytes (the device's used memory less the
             allocator's reserved, after the timed steps; these four CUDA only, the last
             only with one rank per device),
             memory_source, memory_breakdown (dict|None), losses (one per warm-up and timed
             step), grad_norms (the global gradient norm of each of those steps before
             clipping; None when clipping is off),
             loss_steps (the step index of each loss), bandwidth, predicted,
             interference (what else loaded the machine during the timed steps: other
             processes' CPU time and share, load average, GPU clocks, throttling and
             other processes; see harness.rank.interference),
    profile  None, or {traces: [paths relative to the job dir]}; older results may also
             hold steps and summary. harness.results.table summarises the traces themselves.
    engine_settings  the engine's effective settings, flat (None for a job that never
             built its engine): its own (for fsdp2 `groups` and `reshard_after_forward`,
             for fsdp1 `use_orig_params`, prefetch and dtypes, for yafsdp `units`) plus
             clip_grad_norm, optimizer and ckpt_layers.
    Any other top-level key (the SLURM submitter's `slurm`), metric or profile field is kept
    as it was read and written back unchanged.

`Result`, `Metrics` and `Profile` are this layout typed; `read_result` is the one reader
(it checks every field's type first) and `write_result` the one writer.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from harness.jobdir.paths import JobDir

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11

SCHEMA_VERSION = 1
# `interrupted`: the runner was stopped (Ctrl-C, SIGTERM) while the job ran; resume reruns it.
STATUSES = ("ok", "oom", "failed", "timeout", "invalid", "interrupted")
TIMING_FIELDS = ("started_at", "ended_at", "round")  # top level; harness.jobdir.rounds


class CorruptResultError(ValueError):
    """A result.json that cannot be trusted (half-written, not JSON, wrong shape)."""


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Write JSON so that a reader sees the old file or the whole new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, shared_file_mode())  # mkstemp makes 0600; results are meant to be shared
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, indent=2, sort_keys=False, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def shared_file_mode() -> int:
    """The mode a plain `open` would give a new file: 0666 less the process's umask."""
    return 0o666 & ~_umask()


def _umask() -> int:
    try:  # Linux tells it without changing it (os.umask would, for every thread at once)
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# The kinds of value a typed field may hold; the reader checks each before trusting a file.
NUMBER, NUMBERS, TEXT, TEXTS, OBJECT, LIST = "number", "numbers", "text", "texts", "object", "list"
SCALAR_KINDS = (NUMBER, TEXT)  # one CSV cell each; the others are stored as JSON text


def _field(kind: str) -> Any:
    return field(default=None, metadata={"kind": kind})


class _Record:
    """A JSON object with typed fields, keeping keys it does not know in `extra`.

    A field read as an explicit null is written back as null, one never given is left out,
    so a record round-trips unchanged.
    """

    extra: dict[str, Any]
    nulls: frozenset[str]
    LAYOUT: ClassVar[str]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        known = {f.name for f in typed_fields(cls)}
        construct: Any = cls  # the concrete records are dataclasses; this mixin is not
        return construct(
            **{k: v for k, v in data.items() if k in known},
            extra={k: v for k, v in data.items() if k not in known},
            nulls=frozenset(k for k in known if k in data and data[k] is None),
        )

    def to_dict(self) -> dict[str, Any]:
        out = {
            f.name: getattr(self, f.name)
            for f in typed_fields(type(self))
            if getattr(self, f.name) is not None or f.name in self.nulls
        }
        return {**out, **self.extra}


def typed_fields(cls: type) -> list[Any]:
    """The fields of a record that the layout names (not `extra`, not `nulls`)."""
    return [f for f in fields(cls) if "kind" in f.metadata]


@dataclass(kw_only=True)
class Metrics(_Record):
    """`metrics` of result.json: what the timed steps measured (None: not measured).

    Declared in the order the worker writes them, which results.csv's columns follow."""

    step_times_s: list[float] | None = _field(NUMBERS)
    iteration_time_s: float | None = _field(NUMBER)  # median
    iteration_time_p10_s: float | None = _field(NUMBER)
    iteration_time_p90_s: float | None = _field(NUMBER)
    tokens_per_s_per_device: float | None = _field(NUMBER)
    tflops_per_device: float | None = _field(NUMBER)
    mfu: float | None = _field(NUMBER)
    flops_per_token: float | None = _field(NUMBER)
    peak_flops_per_device: float | None = _field(NUMBER)
    peak_flops_source: str | None = _field(TEXT)
    peak_memory_allocated_bytes: int | None = _field(NUMBER)
    peak_memory_reserved_bytes: int | None = _field(NUMBER)
    peak_rss_bytes: int | None = _field(NUMBER)
    peak_rss_scope: str | None = _field(TEXT)
    build_peak_memory_allocated_bytes: int | None = _field(NUMBER)
    build_peak_memory_reserved_bytes: int | None = _field(NUMBER)
    num_alloc_retries: int | None = _field(NUMBER)
    num_ooms: int | None = _field(NUMBER)
    # CUDA context, NCCL buffers and library workspaces: device memory beside the allocator's
    device_memory_outside_allocator_bytes: int | None = _field(NUMBER)
    memory_source: str | None = _field(TEXT)
    memory_breakdown: dict[str, Any] | None = _field(OBJECT)
    losses: list[float | None] | None = _field(NUMBERS)
    loss_steps: list[int] | None = _field(NUMBERS)
    grad_norms: list[float | None] | None = _field(NUMBERS)
    bandwidth: dict[str, Any] | None = _field(OBJECT)  # probe_bandwidth: bus GB/s measured
    predicted: dict[str, Any] | None = _field(OBJECT)  # the planner's row for this job
    # what else loaded the machine during the timed steps (harness.rank.interference)
    interference: dict[str, Any] | None = _field(OBJECT)
    extra: dict[str, Any] = field(default_factory=dict)
    nulls: frozenset[str] = frozenset()
    LAYOUT: ClassVar[str] = "metrics"


@dataclass(kw_only=True)
class Profile(_Record):
    """`profile` of result.json: the job's trace files; older results carry a summary."""

    traces: list[str] | None = _field(TEXTS)  # relative to the job directory
    steps: list[Any] | None = _field(LIST)
    summary: dict[str, Any] | None = _field(OBJECT)
    error: str | None = _field(TEXT)
    warnings: list[str] | None = _field(TEXTS)
    extra: dict[str, Any] = field(default_factory=dict)
    nulls: frozenset[str] = frozenset()
    LAYOUT: ClassVar[str] = "profile"


@dataclass(kw_only=True)
class Result:
    """One job's result.json."""

    status: str
    config: dict[str, Any]  # the resolved JobConfig as a dict
    error: str | None = None
    env: dict[str, Any] = field(default_factory=dict)
    metrics: Metrics = field(default_factory=Metrics)
    profile: Profile | None = None
    engine_settings: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # top-level keys such as `slurm`
    schema_version: int = SCHEMA_VERSION
    started_at: str | None = None  # UTC ISO 8601; None in older results
    ended_at: str | None = None
    round: str | None = None  # harness.jobdir.rounds

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status={self.status!r}; expected one of {STATUSES}")

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def engine(self) -> dict[str, Any]:
        """The config's engine as {name, label, ...}; an engine given as a bare name too."""
        engine = self.config.get("engine") or {}
        return {"name": engine, "label": engine} if isinstance(engine, str) else engine

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "status": self.status,
            "error": self.error,
            "config": self.config,
            "env": self.env,
            "metrics": self.metrics.to_dict(),
            "profile": None if self.profile is None else self.profile.to_dict(),
            "engine_settings": self.engine_settings,
            **{k: v for k, v in self.timing().items() if v is not None},
            **self.extra,
        }

    def timing(self) -> dict[str, str | None]:
        """started_at, ended_at and round (harness.jobdir.rounds)."""
        return {k: getattr(self, k) for k in TIMING_FIELDS}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Result:
        """The record of a result.json's contents, as they are (read_result checks them)."""
        top = {"schema_version", "status", "error", "config", "env", "metrics", "profile"}
        top |= set(TIMING_FIELDS)
        profile = data.get("profile")
        return cls(
            schema_version=data["schema_version"],
            status=data["status"],
            error=data.get("error"),
            config=data["config"],
            env=data.get("env") or {},
            metrics=Metrics.from_dict(data.get("metrics") or {}),
            profile=None if profile is None else Profile.from_dict(profile),
            engine_settings=data.get("engine_settings"),
            extra={k: v for k, v in data.items() if k not in top | {"engine_settings"}},
            **{k: data.get(k) for k in TIMING_FIELDS},
        )


def make_result(
    *,
    status: str,
    config: dict[str, Any],
    error: str | None = None,
    env: dict[str, Any] | None = None,
    metrics: dict[str, Any] | None = None,
    profile: dict[str, Any] | None = None,
    engine_settings: dict[str, Any] | None = None,
) -> Result:
    """A job's result from the pieces its producer holds (the field types are not checked
    here: read_result refuses a file that breaks them)."""
    return Result(
        status=status,
        error=error,
        config=config,
        env=env or {},
        metrics=Metrics.from_dict(metrics or {}),
        profile=None if profile is None else Profile.from_dict(profile),
        engine_settings=engine_settings,
    )


def write_result(job_dir: Path, result: Result) -> Path:
    """The one writer: `<job_dir>/result.json`, atomically."""
    path = JobDir(job_dir).result
    write_json_atomic(path, result.to_dict())
    return path


def read_result(path: Path) -> Result:
    """The one reader: check a result.json and type it; raise CorruptResultError naming the
    file if it cannot be trusted."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptResultError(f"{path}: unreadable result ({e})") from e
    if not isinstance(data, dict):
        raise CorruptResultError(f"{path}: result is not a JSON object")
    missing = [k for k in ("schema_version", "status", "config") if k not in data]
    if missing:
        raise CorruptResultError(f"{path}: missing fields {missing}")
    if data["status"] not in STATUSES:
        raise CorruptResultError(f"{path}: unknown status {data['status']!r}")
    problems = _schema_problems(data)
    if problems:
        raise CorruptResultError(f"{path}: {'; '.join(problems)}")
    return Result.from_dict(data)


def _schema_problems(data: dict[str, Any]) -> list[str]:
    """Fields whose type breaks the layout, each named; empty when the result is sound."""
    problems = []
    if data["schema_version"] != SCHEMA_VERSION:
        problems.append(f"schema_version={data['schema_version']!r}, expected {SCHEMA_VERSION}")
    if not isinstance(data.get("error"), (str, type(None))):
        problems.append("error is not text")
    for key in ("config", "env", "metrics"):
        if not isinstance(data.get(key, {}), dict):
            problems.append(f"{key} is not an object")
    if not isinstance(data.get("profile"), (dict, type(None))):
        problems.append("profile is not an object")
    for key in TIMING_FIELDS:
        if not isinstance(data.get(key), (str, type(None))):
            problems.append(f"{key}={data[key]!r:.60} is not text")
    if problems:
        return problems
    if not isinstance(data["config"].get("engine", {}), (dict, str)):
        problems.append("config.engine is neither an object nor a name")
    for record in (Metrics, Profile):
        values = data.get(record.LAYOUT) or {}
        for f in typed_fields(record):
            value = values.get(f.name)
            if value is not None and not _has_kind(value, f.metadata["kind"]):
                kind = _KIND_NAMES[f.metadata["kind"]]
                problems.append(f"{record.LAYOUT}.{f.name}={value!r:.60} is not {kind}")
    return problems


_KIND_NAMES = {
    NUMBER: "a number",
    NUMBERS: "a list of numbers",
    TEXT: "text",
    TEXTS: "a list of texts",
    OBJECT: "an object",
    LIST: "a list",
}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _has_kind(value: Any, kind: str) -> bool:
    if kind == NUMBER:
        return _is_number(value)
    if kind == TEXT:
        return isinstance(value, str)
    if kind == OBJECT:
        return isinstance(value, dict)
    if not isinstance(value, list):
        return False
    if kind == NUMBERS:
        return all(v is None or _is_number(v) for v in value)
    return kind == LIST or all(isinstance(v, str) for v in value)


def finished_ok(job_dir: Path) -> bool:
    """True when the job directory holds a trustworthy result with status ok."""
    try:
        return read_result(JobDir(job_dir).result).ok
    except CorruptResultError:
        return False
