"""Typos answered at once: the harness names the field before Hydra's `+key` advice, and
the stock launcher's name runs the harness's own SLURM launcher."""

from __future__ import annotations

from harness.cli_overrides import override_errors, with_launcher_alias
from tests.processes import run_module


def test_a_mistyped_field_gets_did_you_mean_on_the_first_try() -> None:
    proc = run_module("harness", "seqlen=128", timeout=120)
    assert proc.returncode == 2
    assert "seqlen is not a field of the job config; did you mean seq_len=?" in proc.stderr
    assert "+seqlen" not in proc.stderr and "Could not override" not in proc.stderr


def test_fields_groups_flags_and_hydras_keys_pass() -> None:
    ok = ["-m", "--cfg", "job", "engine=fsdp2", "engine.reduce_dtype=fp32", "hardware=cpu",
          "experiment=cpu_demo", "seq_len=64,128", "profile.steps=0", "hydra.sweep.dir=x",
          "hydra/launcher=slurm", "+hydra.launcher.partition=gpu", "fault.kind=crash"]  # fmt: skip
    assert override_errors(ok) == []
    assert override_errors(["+seqlen=1"]) == [
        "seqlen is not a field of the job config; did you mean seq_len=?"
    ]
    (nested,) = override_errors(["engine.reduse_dtype=fp32"])
    assert nested.startswith("engine.reduse_dtype") and "reduce_dtype" in nested


def test_submitit_slurm_runs_the_harness_launcher_with_a_note() -> None:
    args, notes = with_launcher_alias(["-m", "hydra/launcher=submitit_slurm", "gpus=16"])
    assert args == ["-m", "hydra/launcher=slurm", "gpus=16"]
    assert len(notes) == 1 and "hydra/launcher=slurm" in notes[0]
    assert with_launcher_alias(["hydra/launcher=slurm"]) == (["hydra/launcher=slurm"], [])


def test_a_mistyped_group_value_gets_did_you_mean() -> None:
    (engine,) = override_errors(["engine=yafsdb"])
    assert engine.startswith("engine='yafsdb' is unknown; did you mean engine=yafsdp?")
    (hardware,) = override_errors(["hardware=a100"])
    assert "did you mean hardware=a100_80gb?" in hardware
    (model,) = override_errors(["model=llama3_70B"])
    assert "did you mean model=llama3_70b?" in model
    (listed,) = override_errors(["-m", "engine=yafsdp,fsdp_1"])
    assert "engine='fsdp_1' is unknown; did you mean engine=fsdp1?" in listed
    ok = ["engine=yafsdp,fsdp1", "model=hf:sweeps/hf_models/x/config.json",
          "seq_len=range(1,3)", "point=llama2_7b_g64_s2048_c0", "model=llama_tiny"]  # fmt: skip
    assert override_errors(ok) == []


def test_a_mistyped_group_value_exits_2_before_hydra() -> None:
    proc = run_module("harness", "engine=yafsdb", "dry_run=true", timeout=120)
    assert proc.returncode == 2
    assert "did you mean engine=yafsdp?" in proc.stderr
    assert "search path" not in proc.stderr.lower() and "provider=" not in proc.stderr
