"""Markdown pieces of the report: tables, call-outs and the formats of its cells."""

from __future__ import annotations

import re
from collections.abc import Sequence

from harness.markdown import markdown_table
from harness.report.matching import MISSING

Table = tuple[list[str], list[list[object]]]  # (header, rows), as the table builders return


def md_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    return markdown_table(header, rows)


def callout(kind: str, text: str) -> str:
    """A GitHub alert block (`> [!WARNING]`): `kind` is NOTE or WARNING."""
    return f"> [!{kind}]\n" + "\n".join(f"> {line}" for line in text.splitlines())


def bullets(items: Sequence[str]) -> str:
    return "\n".join(f"- {item}" for item in items)


def fmt_time(t: float | None) -> str:
    if t is None:
        return MISSING
    return f"{t:#.4g}"  # 4 significant digits, trailing zeros kept: 0.9000, 1.000, 12.34


def fmt_bytes(b: float | None) -> str:
    if b is None:
        return MISSING
    return f"{b / 2**30:.2f} GiB" if abs(b) >= 2**30 else f"{b / 2**20:.1f} MiB"


def fmt_num(x: float | None, spec: str = ".3g") -> str:
    return MISSING if x is None else format(float(x), spec)


def fmt_tolerance(x: float) -> str:
    """A tolerance as prose writes it: 2e-2 (the tables keep Python's 2e-02)."""
    return re.sub(r"e([+-])0*(\d)", r"e\1\2", f"{x:.0e}")


def short_error(error: object) -> str:
    """The line that says what went wrong: a traceback's last line, cut to a table cell."""
    lines = [ln.strip() for ln in str(error or "").splitlines() if ln.strip()]
    if not lines:
        return "(no error text recorded)"
    text = lines[-1]
    return text if len(text) <= 300 else text[:297] + "..."
