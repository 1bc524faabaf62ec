"""`Session` builds a job as the worker does and steps it as every job is timed;
`harness.rank.measure` reduces a rank's memory peaks across ranks in one collective."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from harness.config import JobConfig
from harness.engines.registry import ENGINES
from harness.jobdir.result import Metrics, typed_fields
from harness.models.shapes import ModelShape
from harness.rank.data import token_batch
from harness.rank.measure import MEMORY_TRACKED_STEPS, MemoryPeaks, build_and_warm_up
from harness.rank.session import Session, wrap_model
from harness.rank.train_step import train_step
from tests.distributed import run_on_ranks
from tests.rank.training import short_job, train_jobs

CPU = torch.device("cpu")


@pytest.fixture
def one_rank() -> Iterator[None]:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _job(label: str = "yafsdp", **fields: Any) -> JobConfig:
    defaults: dict[str, Any] = dict(model="llama_tiny", seq_len=16, dtype="fp32", gpus=1)
    return JobConfig(**{**defaults, **fields}, engine=ENGINES[label].config())


def test_a_session_steps_on_the_jobs_data_as_train_step_does(one_rank: None) -> None:
    cfg = _job(grad_accum=2, ckpt_layers=1, seed=5)
    session, by_hand = Session.build(cfg, 0, 1, CPU), Session.build(cfg, 0, 1, CPU)
    assert session.batch(3, 1)[0].equal(
        token_batch(seed=5, step=3, micro=1, rank=0, micro_batch=1, seq_len=16,
                    vocab=session.shape.vocab_size, device=CPU)[0]
    )  # fmt: skip
    for step in range(2):
        loss, norm = session.step(step)
        want_loss, want_norm = train_step(
            by_hand.wrapped, by_hand.optimizer, lambda micro, s=step: by_hand.batch(s, micro),
            grad_accum=2, clip_grad_norm=cfg.clip_grad_norm,
        )  # fmt: skip
        assert loss.item() == want_loss.item()
        assert norm is not None and want_norm is not None and norm.item() == want_norm.item()
    assert session.settings["model_impl"] == "native"
    assert "buffer_plan" in session.settings  # the engine's own settings, after the model's


def test_the_parts_of_a_step_make_the_whole(one_rank: None) -> None:
    cfg = _job("local", grad_accum=2)
    whole, parts = Session.build(cfg, 0, 1, CPU), Session.build(cfg, 0, 1, CPU)
    whole_loss, whole_norm = whole.step(0)
    data = parts.batches(0)
    assert len(data) == 2
    loss = parts.forward_backward(lambda micro: data[micro])
    norm = parts.optimizer_step()
    assert (loss.item(), norm.item() if norm is not None else None) == (
        whole_loss.item(),
        whole_norm.item() if whole_norm is not None else None,
    )


def test_a_session_builds_shapes_no_preset_names_and_other_wraps(one_rank: None) -> None:
    shape = ModelShape(name="check_shape", dim=32, n_layers=3, n_heads=4, n_kv_heads=2,
                       ffn_dim=64, vocab_size=100)  # fmt: skip
    seen = []

    def wrap(model: torch.nn.Module, ctx: Any) -> Any:
        seen.append(ctx.memory_budget_bytes)
        return wrap_model(model, ctx)

    session = Session.build(_job(), 0, 1, CPU, shape=shape, planned_budget=False, wrap=wrap)
    assert session.shape == shape and seen == [None]
    inputs, _ = session.batch(0, 0)
    assert int(inputs.max()) < 100
    assert session.step(0)[0].isfinite()


def _peaks_of_rank(rank: int, world_size: int) -> tuple[MemoryPeaks, int]:
    calls = []
    reduce = dist.all_reduce

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs.get("op"))
        return reduce(*args, **kwargs)

    dist.all_reduce = counted  # type: ignore[assignment]
    unknown_on_rank0 = None if rank == 0 else 10 + rank
    mine = MemoryPeaks(allocated=100 * (rank + 1), reserved=None, rss=1000 - rank,
                       build_allocated=unknown_on_rank0, build_reserved=None, alloc_retries=0,
                       ooms=None, outside_allocator=7)  # fmt: skip
    try:
        return mine.max_across_ranks(CPU), len(calls)
    finally:
        dist.all_reduce = reduce  # type: ignore[assignment]


def test_memory_peaks_take_each_fields_largest_in_one_all_reduce() -> None:
    for peaks, collectives in run_on_ranks(_peaks_of_rank, 2):
        assert collectives == 1
        assert peaks == MemoryPeaks(allocated=200, reserved=None, rss=1000, build_allocated=11,
                                    build_reserved=None, alloc_retries=0, ooms=None,
                                    outside_allocator=7)  # fmt: skip


def test_the_worker_writes_every_metric_those_unknown_as_null(tmp_path: Path) -> None:
    job = short_job("yafsdp", 2, seq_len=16, steps=2)
    (trained,) = run_on_ranks(train_jobs, 2, [job], str(tmp_path))[0]
    assert trained is not None
    written = trained[0]
    assert list(written) == [f.name for f in typed_fields(Metrics)]
    # `predicted` stays null: the job writes its prediction (prediction.json), not the rank.
    unknown_on_cpu = {"peak_memory_reserved_bytes", "build_peak_memory_allocated_bytes",
                      "build_peak_memory_reserved_bytes", "num_alloc_retries", "num_ooms",
                      "device_memory_outside_allocator_bytes", "bandwidth",
                      "predicted"}  # fmt: skip
    assert {k for k, v in written.items() if v is None} == unknown_on_cpu
    assert written["peak_memory_allocated_bytes"] > 0
    assert len(written["losses"]) == len(written["grad_norms"]) == len(written["loss_steps"]) == 2


@pytest.mark.parametrize("label", ["local", "yafsdp"])
def test_the_cpu_peak_sees_a_step_with_the_optimizer_state_whatever_the_warm_up(
    one_rank: None, label: str
) -> None:
    """The CPU peak is tracked over the build and MEMORY_TRACKED_STEPS steps at any
    `warmup_steps`: with one warm-up step it once missed AdamW's moments (llama_small fp32,
    2 ranks: 442 MiB against 720). A warm-up shorter than that runs the missing steps
    untimed, and the timed steps follow them. Under load the peak can hold one layer more
    (seen at any of the three counts, a freed layer racing the next allocation on another
    thread), so the counts agree within one layer's bytes, 2.5% of this peak."""
    from harness.models.llama import build_model

    layer_bytes = 4 * sum(p.numel() for p in build_model("llama_tiny").layers[0].parameters())
    peaks = {}
    for warmup in (1, 2, 3):
        cfg = _job(label, warmup_steps=warmup, steps=1)
        warmed = build_and_warm_up(cfg, 0, 1, CPU, lambda phase: None)
        assert warmed.run.steps_run == max(warmup, MEMORY_TRACKED_STEPS)
        peaks[warmup] = warmed.cpu_allocated
    assert max(peaks.values()) - min(peaks.values()) <= layer_bytes, peaks
