"""Suite B's model_impl=hf row on CPU: a skip saying how to fix it without transformers,
and with transformers the same 2-rank yafsdp/local comparison the GPU runs, on CPU."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from harness.gpucheck import suite_b
from harness.gpucheck.check_rows import SKIP, run_check


def test_without_transformers_the_hf_row_is_a_skip_saying_how(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers fails

    def no_job(*args, **kwargs):
        raise AssertionError("no job may start without transformers")

    monkeypatch.setattr(suite_b, "job_trace", no_job)
    refs = suite_b.References(Path("."))
    row = run_check("B", *suite_b.NAMES[-1], lambda: suite_b.check_hf(refs))
    assert row.result == SKIP
    assert row.detail == "transformers is not installed: run `make gpu-wheels` and carry wheels/"


def test_suite_b_names_one_row_per_engine_and_world_size_and_the_hf_row():
    assert [n for n, _ in suite_b.NAMES] == [
        "7 parity fsdp1 on 2 gloo ranks",
        "7 parity fsdp2 on 2 gloo ranks",
        "7 parity yafsdp on 2 gloo ranks",
        "7 parity deepspeed on 2 gloo ranks",
        "7 parity ya_fsdp on 2 gloo ranks",
        "7 parity yafsdp on 3 gloo ranks",
        "7 hf parity yafsdp on 2 gloo ranks",
    ]


@pytest.mark.slow
def test_hf_parity_passes_on_cpu(monkeypatch, tmp_path):
    pytest.importorskip("transformers")
    on_gpu = suite_b.job_config

    def on_cpu(label, world_size, model_impl="native"):
        return dataclasses.replace(on_gpu(label, world_size, model_impl), device="cpu")

    monkeypatch.setattr(suite_b, "job_config", on_cpu)
    verdict = suite_b.check_hf(suite_b.References(tmp_path))
    assert verdict.ok, verdict.detail
    assert not verdict.skipped
    assert 0 <= verdict.figures["yafsdp_loss_max_rel_diff"] <= suite_b.RTOL
    assert 0 <= verdict.figures["yafsdp_grad_norm_max_rel_diff"] <= suite_b.RTOL
