"""Every job's line ends with what it measured (peak memory, tokens/s, overlap %); a quiet
job that fails still says so; verbose rank 0 logs its steps as torchtitan does."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from harness.jobdir.paths import JobDir
from harness.jobdir.result import make_result
from harness.sweep.console import Console
from tests.processes import run_module
from tests.trace.synthetic import Kernel, nccl, write_gpu_trace

CONFIG = {"model": "llama_mini", "gpus": 2, "seq_len": 256, "ckpt_layers": 1,
          "engine": {"label": "fsdp1"}}  # fmt: skip


def _ok(**metrics: object):
    return make_result(status="ok", config=CONFIG, metrics={"iteration_time_s": 0.2, **metrics})


def test_an_ok_jobs_line_ends_with_peak_tokens_and_overlap(tmp_path: Path) -> None:
    # one step: 100 us of all-gather, half of it under a 50 us compute kernel
    traces = JobDir(tmp_path).traces
    traces.mkdir(parents=True)
    write_gpu_trace(traces / "rank0.json", [Kernel(1, 7, 0, 50), nccl(1, 20, 0, 100)])
    stream = io.StringIO()
    console = Console(total=None, stream=stream)
    result = _ok(peak_memory_allocated_bytes=3 * 2**29, tokens_per_s_per_device=5400.4)
    console.job_finished("job", result, tmp_path, ran=True)
    line = stream.getvalue().splitlines()[0]
    assert "ok  0.2 s/step  peak 1.50 GiB  5,400 tok/s  overlap 50%  (elapsed" in line


def test_without_traces_or_allocator_the_line_says_so(tmp_path: Path) -> None:
    stream = io.StringIO()
    result = _ok(peak_rss_bytes=2**30, tokens_per_s_per_device=12.0)
    Console(total=3, stream=stream).job_finished("job", result, tmp_path, ran=True)
    assert "peak RSS 1.00 GiB  12 tok/s  overlap - (no trace)" in stream.getvalue()


def test_quiet_still_prints_a_failure(tmp_path: Path) -> None:
    stream = io.StringIO()
    console = Console(total=None, quiet=True, stream=stream)
    console.job_finished("job", _ok(), tmp_path, ran=True)
    assert stream.getvalue() == ""
    failed = make_result(status="failed", config=CONFIG, error="rank 1: injected crash")
    console.job_finished("job", failed, tmp_path, ran=True)
    assert stream.getvalue().startswith("job  failed: rank 1: injected crash")


@pytest.mark.slow
def test_under_torchrun_verbose_rank_0_logs_steps_and_prints_the_result_line(
    tmp_path: Path,
) -> None:
    job = tmp_path / "job"
    proc = run_module(
        "torch.distributed.run", "--nproc-per-node", "2", "-m", "harness", "model=llama_tiny",
        "gpus=2", "seq_len=32", "warmup_steps=1", "steps=2", "profile.steps=0",
        "engine=fsdp2", "verbose=true", f"hydra.run.dir={job}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = [line for line in proc.stdout.splitlines() if line.startswith("step:")]
    # rank 0 alone: the warm-up step, one more untimed step (the memory peak must see a step
    # that holds AdamW's moments), two timed
    assert len(steps) == 4, proc.stdout
    assert [s.endswith("(timed)") for s in steps] == [False, False, True, True]
    assert re.match(r"step:  2  loss: +\d+\.\d{4}  grad_norm: +[\d.]+  time: [\d.]+s  tps: ",
                    steps[1])  # fmt: skip
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("llama_tiny gpus=2"))
    assert re.search(r"fsdp2  ok  [\d.]+ s/step  peak [\d.]+ GiB  [\d,]+ tok/s  overlap", line)
    assert f"result: {job / 'result.json'}" in proc.stdout
