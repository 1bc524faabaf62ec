"""Job directory names a user can read, and a dry run that leaves no directory behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.config import fields_living, lifetime_of
from harness.jobdir.recorded_config import RESULT_NEUTRAL_FIELDS
from harness.sweep.empty_dirs import remove_empty_up_to
from harness.sweep.job_dirname import hf_dir_name, job_subdir
from tests.processes import REPO

HF = "/abs/path/qwen_tiny/config.json"
HYDRA_NAME = r"engine=fsdp2,model=hf\:/abs/path/qwen_tiny/config.json,seq_len=64"


def test_an_hf_model_names_its_directory_by_folder_and_short_hash() -> None:
    name = hf_dir_name(HF)
    assert name.startswith("hf-qwen_tiny-") and len(name) == len("hf-qwen_tiny-") + 8
    assert hf_dir_name("/other/qwen_tiny/config.json") != name  # unique per path
    assert job_subdir(HYDRA_NAME) == f"engine=fsdp2,model={name},seq_len=64"
    assert "/" not in job_subdir(HYDRA_NAME) and "\\" not in job_subdir(HYDRA_NAME)
    assert job_subdir("engine=fsdp2,model=llama_tiny") == "engine=fsdp2,model=llama_tiny"
    escaped_comma = job_subdir(r"model=hf\:/a\,b/c/config.json")
    assert escaped_comma == f"model={hf_dir_name('/a,b/c/config.json')}"
    assert job_subdir("") == ""


def test_a_sweep_named_the_old_way_resumes_in_its_old_directories(tmp_path: Path) -> None:
    old = tmp_path / HYDRA_NAME
    old.mkdir(parents=True)
    assert job_subdir(HYDRA_NAME, str(tmp_path)) != HYDRA_NAME  # no result there yet
    (old / "result.json").write_text("{}")
    assert job_subdir(HYDRA_NAME, str(tmp_path)) == HYDRA_NAME


def test_empty_directories_go_up_to_the_kept_one(tmp_path: Path) -> None:
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    (tmp_path / "a" / "note").write_text("x")
    remove_empty_up_to(tmp_path / "a" / "b" / "c", tmp_path)
    assert not (tmp_path / "a" / "b").exists() and (tmp_path / "a" / "note").exists()


@pytest.mark.slow
def test_a_dry_run_leaves_no_directory_behind(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'harness' / 'slurm'}"}
    for args in (
        ["-m", "seq_len=64,128", f"model=hf:{REPO / 'sweeps/hf_models/mistral_tiny'}"],
        [],  # a single job: outputs/<date>/<time>
        ["-m", "seq_len=64", "hydra.sweep.dir=mine/x/y"],
    ):
        proc = subprocess.run([sys.executable, "-m", "harness", *args, "dry_run=true"],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert left == ["mine"]  # it existed before


# Keys of Hydra itself, or a config group that names no value of its own.
NOT_FIELDS = {"experiment", "hydra.sweep.dir", "hydra/launcher"}


def _exclude_keys() -> set[str]:
    config = yaml.safe_load((REPO / "sweeps" / "config.yaml").read_text())
    return set(config["hydra"]["job"]["config"]["override_dirname"]["exclude_keys"])


def test_a_job_directory_is_named_by_measured_fields_alone() -> None:
    """exclude_keys is the config's non-measured fields (their lifetime, marked once in
    harness.config), plus Hydra's own keys. device_spec is a mapping that `hardware=` sets
    beside measured fields, so it has no key of its own to leave out."""
    keys = _exclude_keys()
    assert keys - NOT_FIELDS == set(RESULT_NEUTRAL_FIELDS) - {"device_spec"}
    assert all(lifetime_of(k) != "measured" for k in keys - NOT_FIELDS)
    assert {lifetime_of(k) for k in RESULT_NEUTRAL_FIELDS} == {"runner", "sweep", "planner"}
    assert RESULT_NEUTRAL_FIELDS == fields_living("runner", "sweep", "planner")
    assert "repeat" not in RESULT_NEUTRAL_FIELDS and lifetime_of("engine.name") == "measured"
    with pytest.raises(KeyError, match="no field"):
        lifetime_of("no_such_field")


@pytest.mark.parametrize(
    "override_dirname",
    ["device_spec.name=../../../outside", "device_spec.name=a/b,seq_len=64", "x=..", "x=/abs"],
)
def test_a_config_value_cannot_move_a_job_out_of_its_sweep(
    tmp_path: Path, override_dirname: str
) -> None:
    sweep = tmp_path / "sweep"
    name = job_subdir(override_dirname, str(sweep))
    assert "/" not in name and name not in (".", "..")
    assert (sweep / name).resolve().parent == sweep.resolve()


def test_an_escaped_slash_keeps_distinct_values_apart() -> None:
    assert job_subdir("device_spec.name=a/b") != job_subdir("device_spec.name=a_b")
    assert job_subdir("device_spec.name=a/b") != job_subdir("device_spec.name=a%2Fb")
