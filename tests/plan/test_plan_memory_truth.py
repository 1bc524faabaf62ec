"""The planner's memory as a user reads it: the driver's memory less what lies outside the
allocator, `tight` not counted as fitting, yafsdp's buffer plans (the one held, the
smallest), each engine at its own fewest checkpointed layers, and the default engines."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from harness.plan.cli import job_configs, main
from harness.plan.fit import memory_line_and_errors
from harness.plan.memory.model import NEAR_CAPACITY, estimate_memory
from harness.plan.planner import memory_case, predict_time, smallest_fitting_ckpt
from harness.plan.yafsdp_plans import PRESSURE_PLANS, plan_cost

GIB = 2**30
POINT = ("hardware=a100_80gb", "model=llama2_70b", "gpus=256", "seq_len=4096")


def _json_rows(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict]:
    assert main(["--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_without_an_engine_the_plan_compares_yafsdp_fsdp1_and_fsdp2(capsys) -> None:
    rows = _json_rows(capsys, "hardware=a100_80gb", "model=llama2_7b", "gpus=64")
    assert [r["engine"] for r in rows] == ["yafsdp", "fsdp1", "fsdp2"]


def test_device_memory_is_the_drivers_less_what_lies_outside_the_allocator() -> None:
    (h100,) = job_configs(["hardware=h100_80gb", "model=llama2_7b", "gpus=8", "engine=fsdp1"])
    assert h100.device_memory_gb * 1024 == pytest.approx(81559, abs=1)  # nvidia-smi's MiB
    estimate = estimate_memory(memory_case(h100))
    assert estimate.by_class["overhead"] == int(h100.device_spec.outside_allocator_gb * GIB) > 0
    assert "outside_allocator_gb" in h100.device_spec.sources


def test_own_min_ckpt_plans_each_engine_at_its_fewest_layers_that_are_not_tight(capsys) -> None:
    """Each row at its own minimum, where its peak is under NEAR_CAPACITY of the device
    (one layer fewer is tight or does not fit); yafsdp is compared with both baselines
    though their checkpointing differs, and names its plan and its smallest one."""
    rows = _json_rows(capsys, *POINT, "ckpt_layers=0", "--own-min-ckpt")
    assert {r["engine"] for r in rows} == {"yafsdp", "fsdp1", "fsdp2"}
    for r in rows:
        assert r["ckpt_layers"] == r["min_ckpt_layers_to_fit"] > 0
        assert r["peak_memory_bytes"] < NEAR_CAPACITY * r["device_memory_bytes"]
        assert r["fit_verdict"] == "yes"
    (cfg,) = job_configs([*POINT, "engine=yafsdp"])
    for r in rows:
        # one layer fewer does not fit, with the plan the row runs (yafsdp may run a
        # pressure plan by name; its auto plan is recorded as the plan auto held)
        plan = r["buffer_plan"] if r.get("buffer_plan") in PRESSURE_PLANS else "auto"
        engine = replace(cfg.engine, name=r["engine"], label=r["engine"], buffer_plan=plan)
        fewer = replace(cfg, engine=engine, ckpt_layers=r["ckpt_layers"] - 1)
        peak = estimate_memory(memory_case(fewer)).peak_bytes
        assert peak >= NEAR_CAPACITY * r["device_memory_bytes"], r["engine"]
    yafsdp = next(r for r in rows if r["engine"] == "yafsdp")
    assert set(yafsdp["speedup_vs"]) == {"fsdp1", "fsdp2"}
    smallest = yafsdp["smallest_plan"]
    assert smallest["plan"] in PRESSURE_PLANS and yafsdp["buffer_plan"]
    (at_min,) = job_configs([*POINT, "engine=yafsdp", f"ckpt_layers={yafsdp['ckpt_layers']}"])
    peaks = [plan_cost(at_min, p).peak_bytes for p in PRESSURE_PLANS]
    assert smallest["peak_bytes"] == min(peaks)
    assert smallest["peak_bytes"] <= yafsdp["peak_memory_bytes"]
    assert smallest["iteration_time_s"] >= yafsdp["iteration_time_s"] * 0.999
    # yafsdp's row is no slower than any pressure plan at that plan's own fewest layers
    for plan in PRESSURE_PLANS:
        (job,) = job_configs([*POINT, "engine=yafsdp", f"engine.buffer_plan={plan}"])
        n = smallest_fitting_ckpt(job)
        time = predict_time(replace(job, ckpt_layers=n)) if n is not None else None
        if time is not None:
            assert yafsdp["iteration_time_s"] <= time.iteration_time_s * (1 + 1e-9), plan


def test_a_tight_job_is_refused_by_the_dry_run_with_the_layers_that_fit() -> None:
    (cfg,) = job_configs([*POINT, "ckpt_layers=40", "engine=fsdp1"])
    peak = estimate_memory(memory_case(cfg)).peak_bytes
    tight = replace(cfg, device_memory_gb=peak / 0.95 / GIB)  # the peak is 95% of it
    line, errors = memory_line_and_errors(tight)
    assert line.endswith("tight")
    assert len(errors) == 1 and "tight" in errors[0] and "use ckpt_layers=" in errors[0]
    roomy = replace(cfg, device_memory_gb=peak / 0.8 / GIB)
    assert memory_line_and_errors(roomy)[1] == []
