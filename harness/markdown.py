"""The one markdown table writer: `tabulate`'s GitHub format, with each cell as written.

Cells are not padded to their column's width (`stralign=None`), so a row reads as the
values it holds (`| llama_tiny | 2 | 1.000 |`), and numbers are not re-parsed, so a cell
keeps the digits its caller chose. A `|` in a cell is escaped and a newline becomes a space,
so that no value breaks its row.
"""

from __future__ import annotations

from collections.abc import Sequence

from tabulate import tabulate


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(header: Sequence[object], rows: Sequence[Sequence[object]]) -> str:
    """`header` and `rows` as a GitHub markdown table."""
    return tabulate(
        [[_cell(c) for c in row] for row in rows],
        headers=[_cell(h) for h in header],
        tablefmt="github",
        stralign=None,
        numalign=None,
        disable_numparse=True,
    )
