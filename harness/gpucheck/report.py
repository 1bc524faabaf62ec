"""gpu-check.md and gpu-check.json: one table (check, what it proves, result, figures).

Written to `reports/gpu/<device-slug>/` in the tree and, when the `OUT` variable names a
folder (the device machine's hand-back folder), to that folder too. Running one suite
replaces that suite's rows and keeps the others' from the previous report of the device.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.gpucheck.check_rows import Check, counts
from harness.markdown import markdown_table

MARKDOWN, JSON = "gpu-check.md", "gpu-check.json"
CPU_SLUG = "cpu"


def device_slug(device_name: str | None) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'; no CUDA device -> 'cpu'."""
    if not device_name:
        return CPU_SLUG
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")
    return slug or CPU_SLUG


def merge_rows(previous: Sequence[Check], current: Sequence[Check]) -> list[Check]:
    """The suites run now replace their earlier rows; other suites' rows stay."""
    ran = {r.suite for r in current}
    kept = [r for r in previous if r.suite not in ran]
    return sorted([*kept, *current], key=lambda r: r.suite)


def _figure(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def render_markdown(meta: dict[str, Any], rows: Sequence[Check]) -> str:
    c = counts(rows)
    gpu = meta.get("cuda_device")
    lines = [f"# gpu-check: {gpu or 'CPU only (no CUDA device)'}", ""]
    if not gpu:
        lines += [
            "**This is a CPU run: the GPU checks (suites A, B and D, and suite C at the "
            "published scale) were skipped.** Suite C ran at a reduced size on CPU; no figure "
            "here was measured on a GPU.",
            "",
        ]
    lines += [
        f"- torch {meta.get('torch')}, CUDA {meta.get('cuda') or 'none'}, "
        f"python {meta.get('python')}, git {meta.get('git_revision')}",
        *(
            f"- suite {s}: {info.get('ran', 'run')}, {info.get('when')} "
            f"(git {info.get('git_revision')})"
            + (f", {info['seconds']:g} s" if "seconds" in info else "")
            for s, info in sorted(meta.get("suites", {}).items())
        ),
        f"- {c['pass']} passed, {c['fail']} failed, {c['error']} errors, {c['skip']} skipped",
        "",
    ]
    cells = []
    for r in rows:
        result = f"**{r.result}**" if r.result in ("fail", "error") else r.result
        if r.detail:
            result += f": {r.detail}"
        figures = "; ".join(f"{k}={_figure(v)}" for k, v in r.figures.items())
        cells.append([f"{r.suite}{r.check}", r.proves, result, figures])
    lines.append(markdown_table(["check", "what it proves", "result", "figures"], cells))
    return "\n".join(lines) + "\n"


def read_rows(path: Path) -> list[Check]:
    if not path.is_file():
        return []
    data = json.loads(path.read_text())
    return [Check(**row) for row in data.get("rows", [])]


def write_report(
    meta: dict[str, Any], rows: Sequence[Check], reports_dir: Path | str
) -> list[Path]:
    """Merge `rows` into the device's report under `reports_dir`; copy it to $OUT if set.

    Returns the files written."""
    folder = Path(reports_dir) / device_slug(meta.get("cuda_device"))
    folder.mkdir(parents=True, exist_ok=True)
    previous = read_rows(folder / JSON)
    old_meta = json.loads((folder / JSON).read_text()) if previous else {}
    suites = dict(old_meta.get("meta", {}).get("suites", {}))
    suites.update(meta.get("suites", {}))
    meta = {**meta, "suites": suites}
    merged = merge_rows(previous, rows)
    payload = {"meta": meta, "rows": [r.to_dict() for r in merged]}
    text = json.dumps(payload, indent=2, default=str) + "\n"
    markdown = render_markdown(meta, merged)
    targets = [folder]
    out = os.environ.get("OUT")
    if out:
        targets.append(Path(out))
    written = []
    for target in targets:
        target.mkdir(parents=True, exist_ok=True)
        (target / JSON).write_text(text)
        (target / MARKDOWN).write_text(markdown)
        written += [target / MARKDOWN, target / JSON]
    return written
