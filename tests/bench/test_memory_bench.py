"""Memory of every engine and of each yafsdp buffer plan: llama_small, 2 gloo ranks with
1 thread each, seq 128, fp32 and bf16 (BENCH_MEMORY_DTYPES, comma separated).

test_engine_and_plan_memory: each engine (yafsdp, fsdp1, fsdp2) and each named yafsdp
plan is one `harness` job (its own ranks; the CPU peak tracked over the build and two
steps, as every job tracks it; RSS over its timed steps). Jobs run one after another.
test_plan_step_times_interleaved: the yafsdp plans in one process group, stepped in turn,
so that a shared machine's load falls on every plan alike: the time that each plan's
extra collectives (chunked reduce-scatters) cost, from one run.

    make bench      # or: pytest tests/bench/test_memory_bench.py --benchmark-enable -s
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tabulate import tabulate

from harness.config import NAMED_BUFFER_PLANS, JobConfig, ProfileConfig
from harness.engines.registry import ENGINES
from harness.job.run import run_job
from tests.bench.interleaved import interleaved_runs
from tests.distributed import run_on_ranks

DTYPES = tuple(os.environ.get("BENCH_MEMORY_DTYPES", "fp32,bf16").split(","))
SEQ_LEN = 128
ENGINES_SHOWN = ("yafsdp", "fsdp1", "fsdp2")
PLANS = NAMED_BUFFER_PLANS
# The plans that keep the ends whole, of which half_staging holds the fewest bytes.
WHOLE_END_PLANS = PLANS[:-1]
MIB = 2**20


def _job(engine: str, dtype: str, plan: str | None) -> JobConfig:
    cfg = JobConfig(
        model="llama_small", engine=ENGINES[engine].config(), gpus=2, seq_len=SEQ_LEN,
        dtype=dtype, warmup_steps=2, steps=3, threads_per_rank=1,
        profile=ProfileConfig(steps=0),
    )  # fmt: skip
    if plan:
        cfg.engine.buffer_plan = plan
    return cfg


def _runs() -> list[tuple[str, str | None]]:
    return [*((e, None) for e in ENGINES_SHOWN), *(("yafsdp", p) for p in PLANS)]


def _measure(root: Path) -> list[list]:
    rows = []
    for dtype in DTYPES:
        for engine, plan in _runs():
            name = f"{engine}-{plan or 'auto'}-{dtype}"
            result = run_job(_job(engine, dtype, plan), root / name).result
            assert result.status == "ok", result.error
            m = result.metrics
            chosen = (m.memory_breakdown or {}).get("buffer_plan", {}).get("name", "")
            rows.append([dtype, engine, plan or "auto", chosen,
                         m.peak_memory_allocated_bytes / MIB, m.peak_rss_bytes / MIB,
                         m.iteration_time_s])  # fmt: skip
    return rows


@pytest.mark.slow
def test_engine_and_plan_memory(benchmark, tmp_path: Path) -> None:
    rows = benchmark.pedantic(_measure, args=(tmp_path,), rounds=3, iterations=1)
    headers = ["dtype", "engine", "plan asked", "plan held", "peak MiB", "RSS MiB", "s/step"]
    print()
    print(tabulate(rows, headers=headers, floatfmt=".1f"))
    for dtype, engine, asked, held, peak, rss, step in rows:
        benchmark.extra_info[f"{dtype} {engine} {asked}"] = {
            "plan": held,
            "peak_mib": peak,
            "rss_mib": rss,
            "step_s": step,
        }
    for dtype in DTYPES:  # a plan's peak follows its bytes: the half staging holds least
        peaks = {
            asked: peak
            for d, e, asked, _, peak, _, _ in rows
            if d == dtype and asked in WHOLE_END_PLANS
        }
        assert peaks["half_staging"] == min(peaks.values()), peaks
        # llama_small's ends outsize a layer: their halves shrink the buffers
        split = [
            peak for d, _, asked, _, peak, _, _ in rows if (d, asked) == (dtype, "split_vocab")
        ]
        assert split[0] < peaks["alternating"], (split, peaks)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
def test_plan_step_times_interleaved(benchmark, dtype: str) -> None:
    runs = {plan: (f"yafsdp:{plan}", "native") for plan in PLANS}
    args = ("llama_small", SEQ_LEN, 5, 2, dtype, runs, True)
    measured = benchmark.pedantic(
        lambda: run_on_ranks(interleaved_runs, 2, *args, start_method="fork")[0],
        rounds=3,
        iterations=1,
    )
    benchmark.extra_info.update(measured)
    base = measured["alternating"]["step_s"]
    rows = [[plan, m["step_s"], m["step_s"] / base, m["step_peak_bytes"] / MIB]
            for plan, m in measured.items()]  # fmt: skip
    print()
    print(tabulate(rows, headers=[f"{dtype} seq {SEQ_LEN}", "step s", "/alternating",
                                  "step peak MiB"], floatfmt=".3f"))  # fmt: skip
    assert all(m["step_s"] > 0 for m in measured.values())
