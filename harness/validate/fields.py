"""Keys of a composed config that no field of the job config reads."""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from harness.config import JobConfig


def unknown_field_errors(values: dict[str, Any], schema: type = JobConfig) -> list[str]:
    """Keys in a composed config that no field of `schema` reads (a `+seqlen=512` typo).

    Hydra adds a `+key` that the schema lacks without complaint, and the job would run
    without it: refuse it, naming the field it most likely meant.
    """
    fields = {f.name: f for f in dataclasses.fields(schema)}
    errors = []
    for key, value in values.items():
        field = fields.get(key)
        if field is None:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f"did you mean {close[0]}=?" if close else "see the fields in harness/config.py"
            errors.append(f"{key} is not a field of the job config; {hint}")
        elif isinstance(value, dict) and dataclasses.is_dataclass(field.default_factory):
            nested = unknown_field_errors(value, field.default_factory)
            errors += [f"{key}.{e}" for e in nested]
    return errors
