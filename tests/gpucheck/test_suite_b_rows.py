"""Suite B on CPU: every job it would launch on one GPU passes validation, a missing
package is a skipped row saying what to install, one engine's failure is its own row, and a
gradient twice too large fails the row although every loss is unchanged."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from harness.engines import upstream
from harness.gpucheck import suite_b
from harness.gpucheck.check_rows import ERROR, FAIL, PASS, SKIP
from harness.gpucheck.judging import Trace
from harness.gpucheck.suite_a import parity_verdict, steps_trace
from harness.gpucheck.training import build
from harness.models.shapes import get_shape
from harness.validate import validation_errors


def _jobs() -> list[tuple[str, int, str]]:
    refs = {(p, "native") for p, _ in suite_b.ROWS} | {(suite_b.HF_WORLD_SIZE, "hf")}
    rows = [(label, p, "native") for p, label in suite_b.ROWS]
    return [("local", p, impl) for p, impl in sorted(refs)] + [
        *rows,
        (suite_b.HF_ENGINE, suite_b.HF_WORLD_SIZE, "hf"),
    ]


@pytest.mark.parametrize("label, world_size, model_impl", _jobs())
def test_every_suite_b_job_runs_on_one_gpu(monkeypatch, label, world_size, model_impl):
    monkeypatch.setattr(upstream, "import_problem", lambda: None)  # as where it is installed
    cfg = suite_b.job_config(label, world_size, model_impl)
    assert validation_errors(cfg, local_devices=1) == []


def test_suite_b_runs_the_engines_a_bare_gpu_machine_has():
    assert [(p, label) for p, label in suite_b.ROWS] == [
        (2, "fsdp1"), (2, "fsdp2"), (2, "yafsdp"), (2, "deepspeed"), (2, "ya_fsdp"),
        (3, "yafsdp"),
    ]  # fmt: skip
    assert len(suite_b.NAMES) == len(suite_b.ROWS) + 1


def _fake_jobs(monkeypatch, traces: dict[str, Trace | Exception]) -> list[str]:
    ran: list[str] = []

    def job_trace(label, world_size, root, model_impl="native"):
        ran.append(f"{label}@{world_size}")
        got = traces.get(label, traces["local"])
        if isinstance(got, Exception):
            raise got
        return got

    monkeypatch.setattr(suite_b, "job_trace", job_trace)
    return ran


REF = Trace([7.5, 7.6, 7.7], [1.0, 1.1, 1.2])


def test_a_missing_package_is_a_skipped_row_and_a_failure_is_its_own(monkeypatch):
    def missing(label: str) -> str | None:
        return f"{label} is not installed on this machine" if label in suite_b.PACKAGES else None

    monkeypatch.setattr(suite_b, "missing_package", missing)
    monkeypatch.setattr(suite_b, "transformers_missing", lambda: None)
    crash = RuntimeError("fsdp1 at 2 ranks: crashed: invalid device ordinal")
    ran = _fake_jobs(monkeypatch, {"local": REF, "fsdp1": crash})
    seen = []
    rows = suite_b.run(on_row=seen.append)
    assert seen == rows
    results = {r.check: r.result for r in rows}
    assert results == {
        "7 parity fsdp1 on 2 gloo ranks": ERROR,
        "7 parity fsdp2 on 2 gloo ranks": PASS,
        "7 parity yafsdp on 2 gloo ranks": PASS,
        "7 parity deepspeed on 2 gloo ranks": SKIP,
        "7 parity ya_fsdp on 2 gloo ranks": SKIP,
        "7 parity yafsdp on 3 gloo ranks": PASS,
        "7 hf parity yafsdp on 2 gloo ranks": PASS,
    }
    assert "invalid device ordinal" in rows[0].detail
    assert "deepspeed is not installed" in rows[3].detail  # as the fake says
    # the reference runs once per world size and model, and no skipped engine runs
    assert ran.count("local@2") == 2 and ran.count("local@3") == 1
    assert not any(r.startswith(("deepspeed", "ya_fsdp")) for r in ran)


def test_a_missing_package_is_named_with_its_install_command(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(upstream, "import_problem", lambda: "it is not installed")
    assert suite_b.missing_package("deepspeed") == (
        "deepspeed: it is not installed on this machine (`pip install deepspeed`): "
        "deepspeed not compared"
    )
    assert upstream.INSTALL in (suite_b.missing_package("ya_fsdp") or "")
    assert suite_b.missing_package("fsdp1") is None


def test_a_failed_reference_is_every_row_s_cause(monkeypatch):
    monkeypatch.setattr(suite_b, "missing_package", lambda label: None)
    monkeypatch.setattr(suite_b, "transformers_missing", lambda: "no")
    _fake_jobs(monkeypatch, {"local": RuntimeError("local at 2 ranks: oom")})
    rows = suite_b.run()
    two = [r for r in rows if "on 2 gloo" in r.check and "hf" not in r.check]
    assert all(r.result == ERROR and "local at 2 ranks: oom" in r.detail for r in two)


# ---- gradient norms: what losses alone cannot see ------------------------------------


@pytest.fixture
def one_rank():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _session(label: str, dtype: str, gradient_scale: float = 1.0):
    t = build(
        label, get_shape("llama_tiny"), rank=0, world_size=1, device=torch.device("cpu"),
        dtype=dtype, ckpt_layers=1, grad_accum=2, seq_len=32,
    )  # fmt: skip
    # a wrong 1/P or 1/accumulation factor: every gradient `gradient_scale` times too large
    t.wrapped = dataclasses.replace(t.wrapped, loss_scale=t.wrapped.loss_scale * gradient_scale)
    return t


def test_twice_the_gradient_leaves_the_losses_and_fails_parity(one_rank, monkeypatch):
    right = steps_trace(_session("local", "fp32"))
    doubled = steps_trace(_session("local", "fp32", gradient_scale=2.0))
    # AdamW and clipping hide it from the losses...
    assert doubled.losses == pytest.approx(right.losses, rel=1e-6)
    # ...not from the norms before clipping
    assert doubled.grad_norms == pytest.approx([2 * n for n in right.grad_norms], rel=1e-5)
    _fake_jobs(monkeypatch, {"local": right, "fsdp1": doubled})
    row = suite_b.run_check("B", *suite_b.NAMES[0], lambda: suite_b.parity(
        "fsdp1", 2, suite_b.References(Path("."))))  # fmt: skip
    assert row.result == FAIL and "grad norms" in row.detail and "losses" not in row.detail
    assert row.figures["fsdp1_grad_norm_max_rel_diff"] == pytest.approx(1.0, rel=1e-5)


def test_suite_a_parity_fails_on_twice_the_gradient(one_rank):
    def make(label: str, dtype: str):
        return _session(label, dtype, gradient_scale=2.0 if label == "yafsdp" else 1.0)

    verdict = parity_verdict(make, dtypes=("fp32",))
    assert not verdict.ok and "grad norms" in verdict.detail
    assert verdict.figures["fp32_loss_max_rel_diff"] < 1e-5
    assert parity_verdict(lambda label, dtype: _session(label, dtype), ("fp32",)).ok


def test_rows_past_the_run_s_deadline_are_skipped_rows(monkeypatch):
    monkeypatch.setattr(suite_b, "missing_package", lambda label: None)
    monkeypatch.setattr(suite_b, "transformers_missing", lambda: None)
    ran = _fake_jobs(monkeypatch, {"local": REF})
    left = iter([30.0, 10.0, 0.0, -1.0, -2.0, -3.0, -4.0])
    rows = suite_b.run(time_left=lambda: next(left))
    assert [r.result for r in rows] == [PASS, PASS, SKIP, SKIP, SKIP, SKIP, SKIP]
    assert rows[2].detail == "the run's deadline passed"
    assert ran == ["local@2", "fsdp1@2", "fsdp2@2"]
