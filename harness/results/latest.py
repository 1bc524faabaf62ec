"""Which sweep and which jobs a notebook reads when it is not told.

`python -m harness.results.latest [root]` prints the most recent sweep directory under
`root` (default `multirun/` of the repository), the one `make notebooks` executes the
notebooks on. Paths are resolved against the repository root, so a notebook run from
`notebooks/` (as `jupytext --execute` runs it) finds what a run from the root finds.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.jobdir.paths import RESULT_FILE

REPO_ROOT = Path(__file__).resolve().parents[2]


def repo_path(path: str | Path) -> Path:
    """`path` as given where it exists (relative to the working directory), else
    relative to the repository root."""
    p = Path(path).expanduser()
    return (p if p.is_absolute() or p.exists() else REPO_ROOT / p).absolute()


def sweep_of(job_dir: Path) -> Path:
    """The sweep a job directory belongs to: the nearest ancestor Hydra marked as a sweep
    (multirun.yaml, or results.csv once aggregated), else its parent."""
    for parent in job_dir.parents:
        if (parent / "multirun.yaml").exists() or (parent / "results.csv").exists():
            return parent
    return job_dir.parent


def latest_sweep(root: Path | None = None) -> Path | None:
    """The sweep holding the most recently written result.json under `root`."""
    root = repo_path(root or "multirun")
    results = list(root.rglob(RESULT_FILE)) if root.is_dir() else []
    if not results:
        return None
    return sweep_of(max(results, key=lambda p: p.stat().st_mtime).parent)


def _point(job_dir: Path) -> tuple[object, ...] | None:
    try:
        config = json.loads((job_dir / RESULT_FILE).read_text())["config"]
        return tuple(config.get(k) for k in ("model", "gpus", "seq_len", "ckpt_layers"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def matched_traced_jobs(sweep_dir: Path) -> list[Path]:
    """The jobs with traces of one grid point (its every engine, to compare side by side):
    the point of the most recently traced job."""
    traces = sorted(sweep_dir.rglob("traces/rank0.json*"))
    if not traces:
        return []
    newest = _point(max(traces, key=lambda p: p.stat().st_mtime_ns).parent.parent)
    return [t.parent.parent for t in traces if _point(t.parent.parent) == newest]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = repo_path(args[0] if args else "multirun")
    sweep = latest_sweep(root)
    if sweep is None:
        print(f"no result.json under {root}: run a sweep first (make demo)", file=sys.stderr)
        return 2
    print(sweep)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
