"""Job directory names a user can read: `model=hf-qwen_tiny-1a2b3c4d` for
`model=hf:/abs/path/qwen_tiny/config.json`, not five nested directories of an escaped path.

Hydra names a sweep's job directories by their overrides (`hydra.job.override_dirname`,
values escaped as `hf\\:/abs/...`). `sweeps/config.yaml` passes that name through
`${harness_job_subdir:...}`, which rewrites an `hf:` model path as `hf-<config's folder>-
<8 hex of its path's SHA-1>`: short, one level, and still unique per path. The full path
stays in the job's config (result.json). A sweep started before this naming keeps its old
directories: where `<sweep dir>/<old name>/result.json` exists, the old name is used, so
re-running into the sweep resumes it.

Any other value is one path component: `/` is written `%2F` (and `%` itself `%25`, so two
values never share a name), so `device_spec.name=../../outside` cannot move a job out of
its sweep; a name that would still leave the sweep directory is refused.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from omegaconf import OmegaConf

RESOLVER = "harness_job_subdir"
_UNESCAPED_COMMA = re.compile(r"(?<!\\),")
_ESCAPE = re.compile(r"\\(.)")


def hf_dir_name(path: str) -> str:
    """`hf-<folder>-<hash>` for `hf:<path>` (a config.json, or the folder holding one)."""
    p = Path(path)
    folder = p.parent.name if p.suffix == ".json" else p.name
    digest = hashlib.sha1(path.encode()).hexdigest()[:8]
    return f"hf-{folder or 'config'}-{digest}"


def _one_component(text: str) -> str:
    return text.replace("%", "%25").replace("/", "%2F")


def _readable(item: str) -> str:
    key, _, value = item.partition("=")
    if key.lstrip("+~") == "model" and value.startswith("hf\\:"):
        path = _ESCAPE.sub(r"\1", value)[len("hf:") :]
        return f"{key}={hf_dir_name(path)}"
    return _one_component(item)


def _inside(sweep_dir: str, name: str) -> bool:
    root = Path(sweep_dir or ".").resolve()
    return root in (root / name).resolve().parents


def job_subdir(override_dirname: str, sweep_dir: str = "") -> str:
    """The job's directory below the sweep: Hydra's override name with `hf:` paths made
    readable, or the old name where an earlier sweep's result lives there."""
    name = str(override_dirname or "")
    readable = ",".join(_readable(i) for i in _UNESCAPED_COMMA.split(name)) if name else name
    old_name_kept = readable != name and sweep_dir and _inside(sweep_dir, name)
    if old_name_kept and (Path(sweep_dir) / name / "result.json").exists():
        return name
    if readable and not _inside(sweep_dir, readable):
        raise ValueError(
            f"job directory name {readable!r} would leave the sweep directory; "
            "use a value without '..' path parts"
        )
    return readable


def register() -> None:
    OmegaConf.register_new_resolver(RESOLVER, job_subdir, replace=True)


register()
