"""The profiled pass writes a gzip Chrome trace with the rank in distributedInfo."""

import gzip
import json

import torch

from harness.rank.profiling import capture_profile
from harness.trace import load_trace, summarize_trace


def _step_fn(calls: list[int]):
    model = torch.nn.Linear(32, 32)
    x = torch.randn(4, 32)

    def step(i: int) -> None:
        calls.append(i)
        model(x).sum().backward()

    return step


def test_capture_without_process_group_adds_rank(tmp_path):
    calls: list[int] = []
    path = capture_profile(
        _step_fn(calls), steps=2, warmup=1, out_dir=tmp_path, rank=5, world_size=8, use_cuda=False
    )
    assert path == tmp_path / "traces" / "rank5.json.gz"
    assert calls == [0, 1, 2]  # warm-up, then the recorded steps
    with gzip.open(path, "rt") as f:
        data = json.load(f)  # what Perfetto / chrome://tracing will read
    assert data["distributedInfo"] == {"rank": 5, "world_size": 8}
    steps = {e["name"] for e in data["traceEvents"] if e.get("name", "").startswith("ProfilerStep")}
    assert len(steps) == 2
    assert load_trace(path).rank == 5
    assert len(summarize_trace(path)["steps"]) == 2
    assert [p.name for p in (tmp_path / "traces").iterdir()] == ["rank5.json.gz"]


def test_zero_steps_turns_profiling_off(tmp_path):
    calls: list[int] = []
    out = capture_profile(
        _step_fn(calls), steps=0, warmup=1, out_dir=tmp_path, rank=0, world_size=1, use_cuda=False
    )
    assert out is None and calls == [] and not (tmp_path / "traces").exists()


def test_capture_into_a_job_directory_named_with_a_backslash(tmp_path):
    # Hydra names an hf:<path> job `model=hf\:<path>`; Kineto's writer reads `\` as `/`.
    out_dir = tmp_path / "engine=yafsdp,model=hf\\:sweeps" / "hf_models" / "tiny,seq_len=64"
    path = capture_profile(
        _step_fn([]), steps=1, warmup=1, out_dir=out_dir, rank=0, world_size=1, use_cuda=False
    )
    assert path == out_dir / "traces" / "rank0.json.gz"
    assert len(summarize_trace(path)["steps"]) == 1
    assert [p.name for p in (out_dir / "traces").iterdir()] == ["rank0.json.gz"]
