"""A dry run leaves no directories behind: the empty ones Hydra made for it go again."""

from __future__ import annotations

from pathlib import Path


def first_existing(path: Path) -> Path:
    """The nearest of `path` and its ancestors that exists (taken before Hydra makes any)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def remove_empty_up_to(path: Path, keep: Path) -> None:
    """Remove `path` and its ancestors while they are empty, stopping at `keep` (kept) or
    at the first directory that holds anything."""
    path, keep = Path(path).absolute(), Path(keep).absolute()
    while path != keep and keep in path.parents:
        try:
            path.rmdir()  # only an empty directory
        except OSError:
            return
        path = path.parent


def remove_dry_run_dir(job_dir: Path) -> None:
    """A single dry run's directory, and the empty ancestors Hydra made for it below the
    working directory (`outputs/<date>/`); outside it, the job directory alone."""
    job_dir = Path(job_dir).absolute()
    cwd = Path.cwd().absolute()
    remove_empty_up_to(job_dir, cwd if cwd in job_dir.parents else job_dir.parent)
