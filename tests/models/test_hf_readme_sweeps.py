"""The documented sweeps over the shipped Hugging Face configs (sweeps/hf_models/) stay valid:
each command, as written in the README or docs/, checks every job it would launch (dry run)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from harness.jobdir.result import read_result
from tests.processes import REPO, run_module

CONFIGS = REPO / "sweeps" / "hf_models"


def readme_hf_sweeps() -> list[list[str]]:
    """The `python -m harness -m ...` commands of the README's and docs/' code blocks that
    name a shipped config, as argument lists after `python -m`."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    blocks = [b for page in pages
              for b in re.findall(r"```sh\n(.*?)```", page.read_text(), flags=re.S)]  # fmt: skip
    commands = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            args = shlex.split(line, comments=True)  # a comment may hold an apostrophe
            if args[1:4] == ["-m", "harness", "-m"] and any("hf_models/" in a for a in args):
                commands.append(args[3:])
    return commands


def test_the_readme_sweeps_every_shipped_config() -> None:
    named = {
        a.split("hf_models/")[1] for cmd in readme_hf_sweeps() for a in cmd if "hf_models/" in a
    }
    shipped = {p.parent.name for p in CONFIGS.glob("*/config.json")}
    assert shipped and named == shipped


@pytest.mark.parametrize("command", readme_hf_sweeps(), ids=lambda c: c[1].split("/")[-1])
def test_readme_hf_sweep_is_valid_as_written(command: list[str], tmp_path: Path) -> None:
    args = [a for a in command if not a.startswith("hydra.sweep.dir=")]
    # allow_failures: a GPU sweep's jobs may be refused by this machine alone (checked below)
    proc = run_module("harness", *args, f"hydra.sweep.dir={tmp_path}", "dry_run=true",
                      "allow_failures=true", timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    done = re.search(r"dry run done: (\d+) jobs in ", proc.stdout)
    jobs = [line for line in proc.stdout.splitlines() if "  dry run -> " in line]
    assert done is not None and len(jobs) == int(done.group(1)) > 1, proc.stdout[-2000:]
    # Every job is valid and fits; a GPU sweep checked here may be refused only by this
    # machine, which lacks its GPUs (a dry run checks what the real run would, here).
    for line in jobs:
        assert line.endswith("[ok]") or ("this machine" in line and "predicted peak" not in line)
    assert "model_impl=hf" in proc.stdout


def test_a_profiled_job_of_a_shipped_config_runs(tmp_path: Path) -> None:
    # The job directory is named `...model=hf-mistral_tiny-<hash>,...` (Hydra's own name
    # would nest the escaped path); the whole job, traces included, works under it.
    args = [
        "-m",
        "model=hf:sweeps/hf_models/mistral_tiny",
        "model_impl=hf",
        "hardware=cpu",
        "gpus=2",
        "dtype=fp32",
        "seq_len=32",
        "engine=yafsdp",
        "warmup_steps=1",
        "steps=2",
        "profile.steps=1",
        f"hydra.sweep.dir={tmp_path}",
    ]
    proc = run_module("harness", *args, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (result,) = tmp_path.glob("**/result.json")
    assert read_result(result).ok, read_result(result).error
    assert result.parent.parent == tmp_path and "model=hf-mistral_tiny-" in result.parent.name
    assert sorted(p.name for p in (result.parent / "traces").glob("rank*.json.gz")) == [
        "rank0.json.gz",
        "rank1.json.gz",
    ]
