"""Suite A's stress and delay wrappers, exercised on CPU with gloo (sleeps do nothing).

Only a GPU proves the stream ordering; this proves the wrappers reach the engine, leave a
correct engine's losses unchanged, restore the collectives, and that a read of a poisoned
buffer does reach the loss, so the GPU check can fail."""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist

import yafsdp_impl._collectives as collectives  # what the stress wrappers replace
from harness.gpucheck import judging as delay_model
from harness.gpucheck import stress, suite_a, trace_check
from harness.gpucheck.training import build, train_step
from harness.models.shapes import get_shape
from tests.cuda_fakes import fake_cuda

CPU = torch.device("cpu")


@pytest.fixture
def one_rank(monkeypatch):
    sleeps: list[int] = []
    fake_cuda(monkeypatch, "_sleep", side_effect=sleeps.append)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield sleeps
    dist.destroy_process_group()


def _trainee(grad_accum: int = 2, dtype: str = "fp32"):
    return build(
        "yafsdp", get_shape("llama_tiny"), rank=0, world_size=1, device=CPU, dtype=dtype,
        ckpt_layers=1, grad_accum=grad_accum, seq_len=32,
    )  # fmt: skip


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_stress_leaves_a_correct_engine_exact(one_rank, dtype):
    calm = suite_a.losses(_trainee(dtype=dtype), 2)
    gather, scatter = collectives.all_gather, collectives.reduce_scatter
    t = _trainee(dtype=dtype)
    stress.slow_guarded_writes(stress.yafsdp_of(t), 7)
    with stress.poisoned_collectives(7):
        stressed = suite_a.losses(t, 2)
    assert stressed == calm
    assert (collectives.all_gather, collectives.reduce_scatter) == (gather, scatter)
    assert one_rank and set(one_rank) == {7}  # every wrapper slept


def test_a_read_of_poisoned_weights_reaches_the_loss(one_rank, monkeypatch):
    gather = collectives.all_gather

    def too_early(out, shard, group, async_op):  # as if compute read before the data came
        work = gather(out, shard, group, async_op)
        if work is not None:
            work.wait()
        out.fill_(float("nan"))
        return None

    monkeypatch.setattr(collectives, "all_gather", too_early)
    assert all(math.isnan(x) for x in suite_a.losses(_trainee(), 1))


def test_only_forward_gathers_are_delayed(one_rank):
    t = _trainee(grad_accum=1)
    train_step(t, 0)
    one_rank.clear()
    with stress.delayed_forward_gathers(5):
        train_step(t, 1)
    units = get_shape("llama_tiny").n_layers + 2
    assert len(one_rank) == len(delay_model.forward_hiding([0.0] * units)) == units + 1


def _trace(**data):
    base = {"device_events": 10, "without_step": 0, "compute_ms_per_step": 1.0}
    base.update(comm_ms_per_step=0.0, overlap_pct_ours=None)
    return lambda t, device: {**base, **data}


@pytest.mark.parametrize(
    "data, results",
    [
        ({}, ["pass", "skip"]),  # one-rank NCCL: no comm kernel, nothing to compare
        ({"overlap_pct_ours": 40.0, "overlap_pct_hta": 40.3}, ["pass", "pass"]),
        ({"overlap_pct_ours": 40.0, "overlap_pct_hta": 41.0}, ["pass", "fail"]),
        ({"without_step": 3}, ["fail", "skip"]),
        ({"overlap_pct_ours": 40.0, "hta_missing": "no hta"}, ["pass", "fail"]),
    ],
)
def test_trace_rows(monkeypatch, data, results):
    monkeypatch.setattr(trace_check, "capture_trace", _trace(**data))
    rows = trace_check.trace_checks(lambda: None, CPU)
    assert [r.result for r in rows] == results


def test_a_failed_capture_makes_both_rows_say_so(monkeypatch):
    def broken(t, device):
        raise RuntimeError("CUPTI unavailable")

    monkeypatch.setattr(trace_check, "capture_trace", broken)
    rows = trace_check.trace_checks(lambda: None, CPU)
    assert [r.result for r in rows] == ["error", "skip"] and "CUPTI" in rows[0].detail
