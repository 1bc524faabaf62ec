"""Pre-flight refusals (issue 30): every field named with its fix, before any process starts.

Unit tests on `validation_errors` with hand-built configs and a described machine; the
one subprocess-free end-to-end check is `run_job` on a dry run.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest

from harness.config import (
    BUFFER_PLANS,
    DeviceSpec,
    EngineConfig,
    FaultConfig,
    JobConfig,
    ProfileConfig,
)
from harness.engines.options import ADAPTER_OPTIONS
from harness.engines.registry import ADAPTER_NAMES, ENGINE_SPECS, ENGINES
from harness.validate import validation_errors
from harness.validate.machine import Machine
from tests.models.hf_configs import LLAMA, write_config

# $B of the issue: model=llama_tiny steps=2 warmup_steps=1 profile.steps=0 seq_len=32
B = dict(model="llama_tiny", steps=2, warmup_steps=1, profile=ProfileConfig(steps=0), seq_len=32)
TWO_CORES = Machine(gpus=0, cores=2, memory_bytes=16 * 2**30)


def job(**fields: object) -> JobConfig:
    return JobConfig(**{**B, **fields})  # type: ignore[arg-type]


def engine(registered: str, **changes: Any) -> EngineConfig:
    """The registry's engine `registered`, with `changes` made to its fields."""
    return dataclasses.replace(ENGINES[registered].config(), **changes)


def refused(cfg: JobConfig, *fragments: str, machine: Machine | None = None) -> str:
    """The one error that holds every fragment."""
    errors = validation_errors(cfg, machine=machine)
    hits = [e for e in errors if all(f in e for f in fragments)]
    assert hits, errors
    return hits[0]


# H2: a label is a registry entry's, with its settings -----------------------------------------


@pytest.mark.parametrize(
    ("config", "field", "fix"),
    [
        (engine("fsdp2", label="yafsdp"), "engine.label=yafsdp", "engine=fsdp2"),
        (engine("fsdp2", name="yafsdp"), "engine.name=yafsdp", "engine=yafsdp"),
        (engine("fsdp2_tuned", async_unshard=False), "engine.async_unshard=false", "engine=fsdp2"),
        (engine("fsdp2", async_unshard=True), "engine.async_unshard=true", "engine=fsdp2_tuned"),
        (engine("fsdp2", label="mine"), "engine.label='mine'", "fsdp2_tuned"),
    ],
)
def test_a_label_that_disagrees_with_its_engine_is_refused(
    config: EngineConfig, field: str, fix: str
) -> None:
    refused(job(engine=config), field, fix)


@pytest.mark.parametrize("label", ["fsdp1", "deepspeed", "yafsdp", "local"])
def test_a_compiled_label_that_is_registered_eager_is_refused(label: str) -> None:
    """A comparison never compiles one side only: a compiled fsdp1 would stand against an
    eager yafsdp under fsdp1's published description."""
    error = refused(job(engine=engine(label, compile_blocks=True)), "engine.compile_blocks=true")
    assert f"engine.label={label}" in error and "compile" in error
    assert "fsdp2_compile" in error or "yafsdp_compile" in error


def test_every_registered_engine_and_its_free_options_pass() -> None:
    from harness.engines.upstream import available

    for spec in ENGINE_SPECS:
        if spec.name == "ya_fsdp" and not available():
            continue  # refused for the missing library alone (tests/engines/test_ya_fsdp.py)
        assert validation_errors(job(engine=spec.config())) == [], spec.label
    # options a label does not fix are variants of it, shown as such in the report
    assert validation_errors(job(engine=engine("fsdp2_tuned", reduce_dtype="bf16"))) == []
    assert validation_errors(job(engine=engine("yafsdp", memory_budget_gb=2.0))) == []
    for plan in BUFFER_PLANS:
        assert validation_errors(job(engine=engine("yafsdp", buffer_plan=plan))) == [], plan


def test_buffer_plans_are_the_engines_and_an_unknown_one_is_refused() -> None:
    from yafsdp_impl._plan import PLANS

    assert BUFFER_PLANS == PLANS
    refused(job(engine=engine("yafsdp", buffer_plan="tiny")), "engine.buffer_plan='tiny'",
            "half_staging")  # fmt: skip


# L5: an option the adapter does not read is refused, from one table ---------------------------


@pytest.mark.parametrize(
    ("config", "field", "fix"),
    [
        (engine("yafsdp", async_unshard=True), "engine.async_unshard=true", "engine=fsdp2_tuned"),
        (engine("local", reduce_dtype="bf16"), "engine.reduce_dtype=bf16", "engine=yafsdp"),
        (engine("fsdp1", memory_budget_gb=4.0), "engine.memory_budget_gb=4.0", "engine=yafsdp"),
        (engine("fsdp2", buffer_plan="alternating"), "engine.buffer_plan=alternating", "yafsdp"),
        (engine("fsdp1", sync_every_micro_batch=False), "sync_every_micro_batch=false", "fsdp2"),
    ],
)
def test_an_option_the_engine_ignores_is_refused(
    config: EngineConfig, field: str, fix: str
) -> None:
    refused(job(engine=config), field, fix)


def test_the_options_table_covers_every_adapter_and_option() -> None:
    assert set(ADAPTER_OPTIONS) == set(ADAPTER_NAMES)
    options = {f.name for f in dataclasses.fields(EngineConfig)} - {"name", "label"}
    assert set().union(*ADAPTER_OPTIONS.values()) == options
    for spec in ENGINE_SPECS:  # a label's own settings are ones its adapter reads
        assert set(spec.options) <= ADAPTER_OPTIONS[spec.name], spec.label


# L4, L11: numbers that cannot work -----------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"profile": ProfileConfig(steps=2, warmup=-5)}, "profile.warmup=-5"),
        ({"profile": ProfileConfig(steps=-1)}, "profile.steps=-1"),
        ({"lr": -1.0}, "lr=-1.0"),
        ({"lr": math.nan}, "lr=nan"),
        ({"lr": math.inf}, "lr=inf"),
        ({"memory_limit_gb": math.nan}, "memory_limit_gb=nan"),
        ({"job_timeout_s": math.nan}, "job_timeout_s=nan"),
        ({"fault": FaultConfig(kind="crash", step=99)}, "fault.step=99"),
        ({"fault": FaultConfig(kind="crash", step=-1)}, "fault.step=-1"),
    ],
)
def test_impossible_numbers_are_refused(fields: dict, fragment: str) -> None:
    refused(job(**fields), fragment)


def test_a_fault_step_past_the_last_step_names_the_last_step() -> None:
    error = refused(job(fault=FaultConfig(kind="crash", step=99)), "fault.step=99")
    assert "0..2" in error  # warm-up step 0, timed steps 1 and 2
    assert validation_errors(job(fault=FaultConfig(kind="crash", step=2))) == []
    # the profiled pass steps on: its steps are steps too
    profiled = job(profile=ProfileConfig(steps=2, warmup=1), fault=FaultConfig(kind="hang", step=5))
    assert validation_errors(profiled) == []


# L9: the planner's device lists ----------------------------------------------------------------

A100: dict[str, Any] = dict(
    peak_tflops=312, memory_gbps=2039, gemm_efficiency=0.82, gemm_tile=[256, 128],
    sm_count=108, attention_seq=[512, 1024], attention_tflops=[99, 133],
)  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "fragments"),
    [
        ({"attention_seq": [], "attention_tflops": []}, ("device_spec.attention_seq=[]",)),
        ({"attention_tflops": [99]}, ("device_spec.attention_seq", "device_spec.attention_tflops")),
        ({"attention_seq": [1024, 512]}, ("device_spec.attention_seq", "increasing")),
        ({"gemm_tile": [256]}, ("device_spec.gemm_tile",)),
    ],
)
def test_device_spec_lists_that_cannot_be_priced_are_refused(
    spec: dict, fragments: tuple[str, ...]
) -> None:
    refused(job(device_spec=DeviceSpec(**{**A100, **spec})), *fragments)


def test_a_profile_without_time_figures_needs_no_lists() -> None:
    assert validation_errors(job(device_spec=DeviceSpec())) == []
    assert validation_errors(job(device_spec=DeviceSpec(**A100))) == []


# L6, M7, L4: what this machine can run (checked for a local launch) -----------------------------


def test_nccl_on_a_cpu_machine_blames_the_backend_not_the_device() -> None:
    error = refused(job(backend="nccl"), "backend=nccl", "backend=gloo", machine=TWO_CORES)
    assert error.startswith("backend=nccl") and "device=auto" not in error
    (legacy,) = validation_errors(job(backend="nccl"), local_devices=0)
    assert legacy.startswith("backend=nccl")
    refused(job(device="cuda"), "device=cuda", "hardware=cpu", machine=TWO_CORES)


def test_cpu_ranks_are_related_to_cores_and_memory() -> None:
    error = refused(job(gpus=1_000_000), "gpus=1000000", machine=TWO_CORES)
    assert "2 cores" in error and "gpus<=8" in error and "hydra/launcher=slurm" in error
    small = Machine(gpus=0, cores=64, memory_bytes=2 * 2**30)
    error = refused(job(gpus=32), "gpus=32", "GiB", machine=small)
    assert "gpus<=" in error
    assert validation_errors(job(gpus=2), machine=TWO_CORES) == []
    # a cluster's ranks are not this machine's: no machine, no such check
    assert validation_errors(job(gpus=1024, gpus_per_node=8)) == []


def test_threads_per_rank_above_the_cores_is_refused_for_cpu_jobs() -> None:
    refused(job(threads_per_rank=64), "threads_per_rank=64", "threads_per_rank<=2",
            machine=TWO_CORES)  # fmt: skip
    assert validation_errors(job(threads_per_rank=2), machine=TWO_CORES) == []


def test_a_dry_run_runs_the_machine_checks_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.job import run as job_run
    from harness.validate import machine

    monkeypatch.setattr(machine, "this_machine", lambda cfg: TWO_CORES)
    for fields, fragment in (({"device": "cuda"}, "device=cuda"), ({"backend": "nccl"},
                             "backend=nccl"), ({"gpus": 1000}, "gpus=1000")):  # fmt: skip
        outcome = job_run.run_job(job(dry_run=True, **fields), tmp_path / "job")
        assert outcome.result.status == "invalid", fields
        assert fragment in (outcome.result.error or ""), outcome.result.error


# M1: a Hugging Face config goes through transformers' own checks, and ours ---------------------


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"num_attention_heads": 0}, "num_attention_heads=0"),
        ({"num_key_value_heads": 3}, "num_key_value_heads=3"),
        ({"num_hidden_layers": -1}, "num_hidden_layers=-1"),
        ({"vocab_size": "big"}, "vocab_size"),
    ],
)
def test_a_broken_hf_config_is_refused_naming_its_field(
    tmp_path: Path, change: dict, fragment: str
) -> None:
    model = write_config(tmp_path, "broken", {**LLAMA, **change})
    error = refused(job(model=model, seq_len=32), fragment)
    assert error.startswith(f"model={model!r}"), error


def test_an_exception_in_a_job_becomes_its_failed_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.job import run as job_run
    from harness.jobdir.result import read_result

    def broken(cfg: JobConfig, **kwargs: object) -> list[str]:
        raise ZeroDivisionError("integer division or modulo by zero")

    monkeypatch.setattr(job_run, "validation_errors", broken)
    outcome = job_run.run_job(job(), tmp_path)
    assert outcome.result.status == "failed"
    assert "ZeroDivisionError: integer division or modulo by zero" in (outcome.result.error or "")
    assert read_result(tmp_path / "result.json").status == "failed"


def test_an_aa_twin_label_is_its_engine_under_a_second_name() -> None:
    """`experiment=aa_check` runs yafsdp as `yafsdp_aa`: accepted as yafsdp's A/A twin, and
    held to yafsdp's name and settings like any label."""
    assert validation_errors(job(engine=engine("yafsdp", label="yafsdp_aa"))) == []
    refused(job(engine=engine("fsdp2", label="fsdp1_aa")), "engine.label=fsdp1_aa")
    refused(job(engine=engine("yafsdp", label="nothing_aa")), "not a registered engine", "_aa")


def test_a_cpu_job_whose_predicted_peak_exceeds_the_ram_is_refused_before_launch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """model=llama2_70b gpus=2 on a 24 GiB CPU machine: refused, the dry run included, and
    the run never reaches its launcher."""
    from harness.job import launch
    from harness.job import run as job_run
    from harness.validate import machine

    ram = Machine(gpus=0, cores=2, memory_bytes=24 * 2**30)
    monkeypatch.setattr(machine, "this_machine", lambda cfg: ram)
    big = job(model="llama2_70b", gpus=2, device="cpu", backend="gloo")
    dry = job_run.run_job(dataclasses.replace(big, dry_run=True), tmp_path / "dry")
    assert dry.result.status == "invalid"
    assert "more than this machine's 24.0 GiB of RAM" in (dry.result.error or "")

    def no_launch(*args: object, **kwargs: object) -> None:
        raise AssertionError("a rank was started")

    monkeypatch.setattr(launch, "launch_local", no_launch)
    ran = job_run.run_job(big, tmp_path / "run")
    assert ran.result.status == "invalid" and "llama2_70b" in (ran.result.error or "")
    small = job_run.run_job(job(dry_run=True, device="cpu", backend="gloo"), tmp_path / "ok")
    assert small.result.status == "ok", small.result.error


# The planner's device figures: each in its range, named with a fix, before any plan -----------

H100_TWO_NODES = ["hardware=h100_80gb", "model=llama2_7b", "gpus=16", "engine=yafsdp"]


@pytest.mark.parametrize(
    "override",
    [
        "device_spec.peak_tflops=-312",
        "device_spec.gemm_efficiency=5",
        "device_spec.memory_efficiency=1.5",
        "device_spec.memory_gbps=-1",
        "device_spec.sm_count=-4",
        "device_spec.launch_us=-8",
        "device_spec.nccl_sms=200",
        "device_spec.network.nics_per_node=-1",
        "device_spec.network.nics_per_node=0",
        "device_spec.network.nic_gbps=0",
        "device_spec.network.nic_efficiency=1.2",
        "device_spec.network.nvlink_channel_gbps=-20",
        "device_spec.network.node_decline_per_doubling=1",
        "device_spec.network.decline_from_nodes=0",
        "device_spec.network.net_step_us=[2.7,-4.0,14.0]",
    ],
)
def test_impossible_device_figures_are_refused_naming_the_field(override: str) -> None:
    from harness.plan.cli import PlanError, job_configs

    field = override.split("=")[0]
    with pytest.raises(PlanError) as refusal:
        job_configs([*H100_TWO_NODES, override])
    message = str(refusal.value)
    assert f"{field}=" in message and ("must" in message), message
    assert "sweeps/hardware" in message  # where the right figure comes from


def test_the_shipped_hardware_profiles_pass_the_range_checks() -> None:
    from harness.plan.cli import job_configs

    for hardware in ("a100_80gb", "h100_80gb", "cpu", "local"):
        assert job_configs([f"hardware={hardware}", "model=llama2_7b", "gpus=16", "engine=yafsdp"])


# The torch version a plan models ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "fragments"),
    [
        (["torch_version=1.0", "engine=yafsdp"], ("torch_version=1.0", "2.1")),
        (["torch_version=2.0", "engine=fsdp1"], ("torch_version=2.0", "2.1")),
        (["torch_version=2.2", "engine=fsdp2"], ("torch_version=2.2", "engine=fsdp2", "FSDP2")),
        (["torch_version=latest", "engine=yafsdp"], ("torch_version='latest'", "major.minor")),
    ],
)
def test_a_torch_the_planner_does_not_model_is_refused(overrides: list, fragments: tuple) -> None:
    from harness.plan.cli import PlanError, job_configs

    with pytest.raises(PlanError) as refusal:
        job_configs(["hardware=a100_80gb", "model=llama2_7b", "gpus=64", *overrides])
    assert all(f in str(refusal.value) for f in fragments), str(refusal.value)


def test_a_torch_the_planner_models_is_planned() -> None:
    from harness.plan.cli import job_configs

    for engine, version in (("fsdp1", "2.1"), ("fsdp2", "2.3"), ("yafsdp", "2.13")):
        point = ["hardware=a100_80gb", "model=llama2_7b", "gpus=64"]
        assert job_configs([*point, f"engine={engine}", f"torch_version={version}"])
