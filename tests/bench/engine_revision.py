"""The yafsdp engine of another git revision, beside this tree's, in one process group.

`yafsdp_at(rev)` copies that revision's `yafsdp_impl/` out of git into a temporary folder
as a package of its own name (`yafsdp_impl_<rev>`, its imports renamed), so both engines
load in one process. `wrap_at(rev, model, ctx)`, given to `Session.build` as its `wrap`,
wraps a model with it through this tree's harness adapter (the same units, initial values,
dtypes and budget), passing only the arguments that revision's `YaFSDP` takes. An
interleaved run names it `yafsdp@<rev>`.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import io
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

from torch import nn

from harness.engines import yafsdp as adapter
from harness.engines.base import RunContext, Wrapped
from harness.rank.session import wrap_model

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def yafsdp_at(rev: str) -> Any:
    """The `yafsdp_impl` package of git revision `rev`, imported under its own name."""
    sha = subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.strip()  # fmt: skip
    name = f"yafsdp_impl_{sha}"
    archive = subprocess.run(["git", "archive", sha, "yafsdp_impl"], cwd=ROOT, check=True,
                             capture_output=True).stdout  # fmt: skip
    folder = Path(tempfile.mkdtemp(prefix="yafsdp-rev-"))
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    package = folder / name
    (folder / "yafsdp_impl").rename(package)
    for source in package.glob("*.py"):
        source.write_text(re.sub(r"\byafsdp_impl\b", name, source.read_text()))
    sys.path.insert(0, str(folder))
    return importlib.import_module(name)


def wrap_at(rev: str, model: nn.Module, ctx: RunContext) -> Wrapped:
    """`wrap_model` with revision `rev`'s engine in place of this tree's."""
    engine_class = yafsdp_at(rev).YaFSDP
    accepted = inspect.signature(engine_class).parameters

    def build(*args: Any, **kwargs: Any) -> Any:
        return engine_class(*args, **{k: v for k, v in kwargs.items() if k in accepted})

    def describe(engine: Any) -> str:
        return engine.buffer_plan.describe()

    with (
        mock.patch.object(adapter, "YaFSDP", build),
        mock.patch.object(adapter, "plan_setting", describe),
    ):
        return wrap_model(model, ctx)
