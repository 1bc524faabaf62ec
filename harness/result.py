"""The per-job `result.json`: its schema, atomic writing and careful reading (no torch).

Layout (schema_version 1):
    schema_version, status (ok|oom|failed|timeout|invalid|interrupted), error (str|None),
    config   the resolved JobConfig as a dict (engine is a dict with name and label),
    env      torch, cuda, nccl, backend, device_name, device_count, world_size, host,
             git_revision, threads_per_rank,
    metrics  step_times_s, iteration_time_s (median), iteration_time_p10_s,
             iteration_time_p90_s, tokens_per_s_per_device, tflops_per_device, mfu,
             peak_flops_per_device, peak_flops_source, flops_per_token,
             peak_memory_allocated_bytes, peak_memory_reserved_bytes, peak_rss_bytes,
             peak_rss_scope ("timed steps", or "process lifetime" where the OS cannot
             restart the high-water mark), build_peak_memory_allocated_bytes,
             build_peak_memory_reserved_bytes, num_alloc_retries, num_ooms (CUDA only),
             memory_source, memory_breakdown (dict|None), losses (one per warm-up and timed
             step), grad_norms (the global gradient norm of each of those steps before
             clipping; None when clipping is off),
    profile  None, or {traces: [paths relative to the job dir]}; older results may also
             hold steps and summary. harness.results summarises the traces themselves.
    engine_settings  the engine's effective settings, flat (None for a job that never
             built its engine): its own (for fsdp2 `groups` and `reshard_after_forward`,
             for fsdp1 `use_orig_params`, prefetch and dtypes, for yafsdp `units`) plus
             clip_grad_norm, optimizer and ckpt_layers.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
RESULT_FILE = "result.json"
# `interrupted`: the runner was stopped (Ctrl-C, SIGTERM) while the job ran; resume reruns it.
STATUSES = ("ok", "oom", "failed", "timeout", "invalid", "interrupted")
# Config fields that cannot change a job's measurements. Resume ignores them when it compares
# a stored result's config with the requested one, and the report never tells jobs apart by
# them. Everything else in the config counts.
RESULT_NEUTRAL_FIELDS = frozenset(
    {"dry_run", "quiet", "verbose", "job_timeout_s", "collective_timeout_s"}
)

_NUMBER_METRICS = (
    "iteration_time_s",
    "iteration_time_p10_s",
    "iteration_time_p90_s",
    "tokens_per_s_per_device",
    "tflops_per_device",
    "mfu",
    "peak_flops_per_device",
    "flops_per_token",
    "peak_memory_allocated_bytes",
    "peak_memory_reserved_bytes",
    "peak_rss_bytes",
)
_NUMBER_LIST_METRICS = ("step_times_s", "losses")
_TEXT_METRICS = ("peak_flops_source", "peak_rss_scope", "memory_source")


class CorruptResultError(ValueError):
    """A result.json that cannot be trusted (half-written, not JSON, wrong shape)."""


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Write JSON so that a reader sees the old file or the whole new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; results are meant to be shared
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, indent=2, sort_keys=False, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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


def make_result(
    *,
    status: str,
    config: dict[str, Any],
    error: str | None = None,
    env: dict[str, Any] | None = None,
    metrics: dict[str, Any] | None = None,
    profile: dict[str, Any] | None = None,
    engine_settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    if status not in STATUSES:
        raise ValueError(f"status={status!r}; expected one of {STATUSES}")
    return {
        "schema_version": SCHEMA_VERSION,
        "status": status,
        "error": error,
        "config": config,
        "env": env or {},
        "metrics": metrics or {},
        "profile": profile,
        "engine_settings": engine_settings,
    }


def write_result(job_dir: Path, result: dict[str, Any]) -> Path:
    path = Path(job_dir) / RESULT_FILE
    write_json_atomic(path, result)
    return path


def read_result(path: Path) -> dict[str, Any]:
    """Read and check a result.json; raise CorruptResultError naming the file if unusable."""
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
    problems = schema_problems(data)
    if problems:
        raise CorruptResultError(f"{path}: {'; '.join(problems)}")
    return data


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def schema_problems(data: dict[str, Any]) -> list[str]:
    """Fields whose type breaks the schema above, each named; empty when the result is sound."""
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
    if problems:
        return problems
    if not isinstance(data["config"].get("engine", {}), (dict, str)):
        problems.append("config.engine is neither an object nor a name")
    metrics = data.get("metrics") or {}
    for key in _NUMBER_METRICS:
        if metrics.get(key) is not None and not _is_number(metrics[key]):
            problems.append(f"metrics.{key}={metrics[key]!r} is not a number")
    for key in _NUMBER_LIST_METRICS:
        values = metrics.get(key)
        if values is not None and not (
            isinstance(values, list) and all(v is None or _is_number(v) for v in values)
        ):
            problems.append(f"metrics.{key}={values!r:.60} is not a list of numbers")
    for key in _TEXT_METRICS:
        if not isinstance(metrics.get(key), (str, type(None))):
            problems.append(f"metrics.{key}={metrics[key]!r} is not text")
    if not isinstance(metrics.get("memory_breakdown"), (dict, type(None))):
        problems.append("metrics.memory_breakdown is not an object")
    profile = data.get("profile") or {}
    if not isinstance(profile.get("summary", {}), (dict, type(None))):
        problems.append("profile.summary is not an object")
    traces = profile.get("traces")
    if traces is not None and not (
        isinstance(traces, list) and all(isinstance(t, str) for t in traces)
    ):
        problems.append("profile.traces is not a list of paths")
    return problems


def finished_ok(job_dir: Path) -> bool:
    """True when the job directory holds a trustworthy result with status ok."""
    try:
        return read_result(Path(job_dir) / RESULT_FILE)["status"] == "ok"
    except CorruptResultError:
        return False
