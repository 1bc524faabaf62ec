"""The CUDA paths, checked without a GPU: backend choice and device mapping, pre-launch
refusals, tokens drawn on the device, the profiled pass synchronising every step, and the
allocator peaks restarted after build and warm-up."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from harness.config import JobConfig
from harness.placement import Placement, cuda_index, resolve_backend, resolved
from harness.rank import measure, metrics
from harness.rank import memory_peaks as memory
from harness.rank.data import token_batch
from harness.validate import validation_errors
from tests.cuda_fakes import fake_cuda


def test_backend_auto_follows_the_device() -> None:
    assert resolve_backend("auto", "cuda") == "nccl"
    assert resolve_backend("auto", "cpu") == "gloo"
    assert resolve_backend("gloo", "cuda") == "gloo"


def test_gloo_shares_gpus_round_robin_nccl_keeps_one_each() -> None:
    assert [cuda_index("gloo", r, 1) for r in range(4)] == [0, 0, 0, 0]
    assert [cuda_index("gloo", r, 2) for r in range(4)] == [0, 1, 0, 1]
    assert [cuda_index("nccl", r, 4) for r in range(4)] == [0, 1, 2, 3]
    # a cluster that binds one GPU to each task: every rank sees its own as device 0
    assert [cuda_index("nccl", r, 1) for r in range(4)] == [0, 0, 0, 0]
    with pytest.raises(RuntimeError, match="local rank 3 has no GPU of its own"):
        cuda_index("nccl", 3, 2)


def test_mfu_peak_follows_the_card_by_name() -> None:
    # names as torch.cuda.get_device_name gives them
    peaks = {
        "NVIDIA A100-SXM4-80GB": 312e12,
        "NVIDIA H100 80GB HBM3": 989e12,
        "NVIDIA H100 PCIe": 756e12,
        "NVIDIA H100 NVL": 835e12,
        "NVIDIA H200": 989e12,
        "Tesla V100-SXM2-32GB": None,
    }
    assert {name: metrics.spec_peak_flops(name) for name in peaks} == peaks


def test_pick_device_maps_gloo_ranks_onto_the_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    chosen = []
    fake_cuda(monkeypatch, "device_count", 1)
    fake_cuda(monkeypatch, "set_device", side_effect=chosen.append)
    cfg = JobConfig(device="cuda", backend="gloo", gpus=3)
    env = {"RANK": "2", "WORLD_SIZE": "3", "LOCAL_RANK": "2"}
    place = Placement.of_rank(cfg, env)
    assert (place.device, place.backend, place.local_rank) == (torch.device("cuda", 0), "gloo", 2)
    assert chosen == [0]


@pytest.mark.parametrize("cuda", [True, False])
def test_auto_resolves_alike_for_the_rank_and_the_planner(
    monkeypatch: pytest.MonkeyPatch, cuda: bool
) -> None:
    fake_cuda(monkeypatch, "is_available", cuda)
    fake_cuda(monkeypatch, "device_count", 2)
    fake_cuda(monkeypatch, "set_device", None)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    cfg = JobConfig(device="auto", backend="auto", gpus=2)
    place = Placement.of_rank(cfg, {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"})
    want = ("cuda", "nccl") if cuda else ("cpu", "gloo")
    assert (place.device.type, place.backend) == want
    planned = resolved(cfg)
    assert (
        (planned.device, planned.backend) == want == (place.job(cfg).device, place.job(cfg).backend)
    )


@pytest.mark.parametrize(
    "overrides, local_gpus, fragment",
    [
        ({"backend": "nccl", "device": "cpu"}, None, "backend=nccl needs CUDA GPUs but device=cpu"),
        ({"backend": "nccl", "gpus": 4}, 1, "gpus=4 is more than the 1 GPUs on this machine"),
        ({"backend": "auto", "gpus": 2}, 1, "NCCL needs one GPU per rank"),
        ({"backend": "mpi"}, None, "backend='mpi' is unknown; choose one of: auto, nccl, gloo"),
    ],
)
def test_refused_before_launch(overrides: dict, local_gpus: int | None, fragment: str) -> None:
    errors = validation_errors(JobConfig(**overrides), local_devices=local_gpus)
    assert any(fragment in e for e in errors), errors


def test_gloo_may_put_several_ranks_on_one_gpu() -> None:
    cfg = JobConfig(device="cuda", backend="gloo", gpus=4)
    assert validation_errors(cfg, local_devices=1) == []


def test_tokens_are_drawn_on_the_device_without_a_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_copy(*args, **kwargs):
        raise AssertionError("token_batch copied its tokens to the device")

    monkeypatch.setattr(torch.Tensor, "to", no_copy)
    kw = dict(seed=0, step=3, micro=1, micro_batch=2, seq_len=8, vocab=50)
    inputs, targets = token_batch(rank=0, device=torch.device("cpu"), **kw)
    again, _ = token_batch(rank=0, device=torch.device("cpu"), **kw)
    other, _ = token_batch(rank=1, device=torch.device("cpu"), **kw)
    assert inputs.shape == (2, 8) and torch.equal(inputs[:, 1:], targets[:, :-1])
    assert torch.equal(inputs, again) and not torch.equal(inputs, other)


def test_profiled_pass_synchronises_after_every_step(monkeypatch, tmp_path: Path) -> None:
    log: list[str] = []
    monkeypatch.setattr(measure, "synchronize", lambda device: log.append("sync"))

    def fake_capture(run_step, *, steps, warmup, **_):
        for i in range(warmup + steps):
            run_step(i)
        return None

    import harness.rank.profiling

    monkeypatch.setattr(harness.rank.profiling, "capture_profile", fake_capture)
    cfg = JobConfig(warmup_steps=1, steps=2)

    class Steps:
        session = SimpleNamespace(cfg=cfg, rank=0, world_size=2, device=torch.device("cpu"))
        steps_run = 3  # the warm-up step and the two timed ones came before

        def step(self, step: int) -> None:
            log.append(f"step{step}")

    profile = measure.profiled_pass(Steps(), tmp_path, lambda phase: None)  # type: ignore[arg-type]
    assert log == ["step3", "sync", "step4", "sync", "step5", "sync"]
    # the job lists its traces; summaries are computed offline (harness.results.table)
    # (and says whether CUDA sync events were recorded: never on CPU)
    assert profile == {
        "traces": ["traces/rank0.json.gz", "traces/rank1.json.gz"],
        "cuda_sync_events": False,
    }


def test_cuda_peaks_restart_after_finishing_queued_work(monkeypatch) -> None:
    log: list[str] = []
    # autospecs: a call the real functions would refuse fails here (side effects see its args)
    fake_cuda(monkeypatch, "synchronize", side_effect=lambda device: log.append("sync"))
    fake_cuda(
        monkeypatch, "max_memory_allocated", side_effect=lambda device: log.append("read") or 7
    )
    fake_cuda(monkeypatch, "max_memory_reserved", 9)
    fake_cuda(
        monkeypatch, "reset_peak_memory_stats", side_effect=lambda device: log.append("reset")
    )
    assert memory.restart_cuda_peaks(torch.device("cuda", 0)) == (7, 9)
    assert log == ["sync", "read", "reset"]


@pytest.mark.parametrize("cuda", [True, False])
def test_the_planner_plans_auto_as_the_rank_runs_it(monkeypatch: pytest.MonkeyPatch, cuda: bool):
    from harness.plan.planner import memory_case

    fake_cuda(monkeypatch, "is_available", cuda)
    case = memory_case(JobConfig(device="auto", backend="auto"), with_budget=False)
    assert case.asynchronous is cuda  # NCCL overlaps; a CPU dry run is planned as gloo
    assert (
        memory_case(JobConfig(device="cuda", backend="gloo"), with_budget=False).asynchronous
        is False
    )
