"""Measured CPU peak allocated bytes of every engine, each case built and stepped as a job
builds and warms up (model, engine, optimizer, two steps), in one process group."""

from __future__ import annotations

import gc
from typing import Any

import torch

from harness.config import JobConfig
from harness.engines.registry import ENGINES
from harness.rank.memory_peaks import cpu_peak_allocated, frees_counted_on_every_thread
from harness.rank.session import Session

STEPS = 2  # the job's memory-tracked warm-up steps: the second holds the AdamW state


def peak_of(cfg: JobConfig, rank: int, world_size: int) -> int:
    def run() -> None:
        session = Session.build(cfg, rank, world_size, torch.device("cpu"))
        for step in range(STEPS):
            session.step(step)
        del session
        gc.collect()  # while tracked: the next case then starts from this one's baseline

    # What earlier cases left alive, read from one small allocation.
    start = cpu_peak_allocated(lambda: torch.empty(1))[1] - 4
    _, peak = cpu_peak_allocated(run)
    return peak - start


def measure(rank: int, world_size: int, cases: list[dict[str, Any]]) -> list[int]:
    """Peak allocated bytes of this rank for each case (model, seq_len, ckpt_layers, engine;
    optionally dtype, fp32 by default, and yafsdp's buffer_plan)."""
    peaks = []
    # Held across cases, so a block one case allocates and gloo frees later still leaves
    # the tally before the next case reads its baseline.
    with frees_counted_on_every_thread() as exact:
        assert exact, "this torch's libc10 does not export the CPU allocator's tally flag"
        for case in cases:
            engine = ENGINES[case["engine"]].config()
            if "buffer_plan" in case:
                engine.buffer_plan = case["buffer_plan"]
            cfg = JobConfig(
                model=case["model"], seq_len=case["seq_len"], ckpt_layers=case["ckpt_layers"],
                engine=engine, gpus=world_size, dtype=case.get("dtype", "fp32"), device="cpu",
            )  # fmt: skip
            peaks.append(peak_of(cfg, rank, world_size))
    return peaks
