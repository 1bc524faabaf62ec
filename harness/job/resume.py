"""Resume: may a job directory's stored result stand for the job that is asked for now?

Only when it is `ok` and was measured with the same resolved config, apart from the
fields that cannot change a measurement (`harness.jobdir.recorded_config.RESULT_NEUTRAL_FIELDS`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.jobdir.paths import RESULT_FILE
from harness.jobdir.recorded_config import flatten, is_neutral, recorded_config
from harness.jobdir.result import CorruptResultError, Result, read_result

_ABSENT = "(absent)"
_FINGERPRINT = "model_config_sha256"  # an hf: config.json's content


def config_differences(stored: Result, requested: dict[str, Any]) -> list[str]:
    """'field: stored -> requested' for every field that changes results and differs."""
    old, new = recorded_config(stored), flatten(requested)
    diffs = []
    for field in sorted(set(old) | set(new)):
        if is_neutral(field):
            continue
        a, b = old.get(field, _ABSENT), new.get(field, _ABSENT)
        if field == _FINGERPRINT and a in ("", _ABSENT):
            continue  # recorded before the file's hash was: it stands, as it always did
        if a != b:
            diffs.append(f"{field}: {a!r} -> {b!r}")
    return diffs


def rerun_reason(job_dir: Path, config: dict[str, Any]) -> str | None:
    """Why the job must run (again), or None when its stored ok result stands for it."""
    path = Path(job_dir) / RESULT_FILE
    if not path.exists():
        return "no result yet"
    try:
        stored = read_result(path)
    except CorruptResultError as e:
        return f"stored result is unusable ({str(e).removeprefix(f'{path}: ')})"
    if not stored.ok:
        return f"previous attempt ended {stored.status}"
    diffs = config_differences(stored, config)
    if diffs:
        shown = "; ".join(diffs[:3]) + (f"; and {len(diffs) - 3} more" if len(diffs) > 3 else "")
        return f"stored ok result was measured with another config ({shown})"
    return None
