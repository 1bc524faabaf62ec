"""Helpers every group of checks shares: how a refusal names a field and its choices."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def shown(value: Any) -> str:
    """A value as the command line writes it: `true`/`false`, numbers and words bare."""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def one_of(field: str, value: Any, choices: Iterable[str], *, more: str = "") -> str | None:
    """The refusal of a `value` outside `choices`, naming them (and `more` ways), or None."""
    choices = tuple(choices)
    if value in choices:
        return None
    return f"{field}={value!r} is unknown; choose one of: {', '.join(choices)}{more}"


def present(*errors: str | None) -> list[str]:
    """The errors that were found (checks return None for a field that passes)."""
    return [e for e in errors if e]
