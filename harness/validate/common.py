"""Helpers every group of checks shares: how a refusal names a field and its choices."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any


def shown(value: Any) -> str:
    """A value as the command line writes it: `true`/`false`, numbers and words bare."""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def closest(value: Any, choices: Iterable[str]) -> str | None:
    """The choice `value` most likely meant: the same but for case, else the nearest
    spelling (`yafsdb` -> `yafsdp`, `a100` -> `a100_80gb`), else None."""
    choices = tuple(choices)
    text = str(value)
    for choice in choices:
        if choice.lower() == text.lower():
            return choice
    starts = [c for c in choices if c.lower().startswith(text.lower())]
    if len(starts) == 1:
        return starts[0]
    near = difflib.get_close_matches(text, choices, n=1, cutoff=0.6)
    return near[0] if near else None


def one_of(field: str, value: Any, choices: Iterable[str], *, more: str = "") -> str | None:
    """The refusal of a `value` outside `choices`, naming the likeliest one and all of them
    (and `more` ways), or None."""
    choices = tuple(choices)
    if value in choices:
        return None
    guess = closest(value, choices)
    hint = f"did you mean {field}={guess}? " if guess else ""
    return f"{field}={value!r} is unknown; {hint}choose one of: {', '.join(choices)}{more}"


def present(*errors: str | None) -> list[str]:
    """The errors that were found (checks return None for a field that passes)."""
    return [e for e in errors if e]
