"""yafsdp vs fsdp2 (default and tuned), fsdp1 and unsharded local: llama_small, 2 gloo
ranks with 1 thread each, same per-rank batch, seq 256 and 1024, in one run.

BENCH_DTYPE sets the parameter dtype. Unset, it is bf16 (the published dtype) unless this
CPU's one-thread bf16 matmul runs under half its fp32 rate (AVX2 only, no AVX512-BF16 or
AMX): there compute would swamp communication and the run take hours, so fp32 is used and
the choice is printed with both rates.

test_yafsdp_speed_and_memory: each configuration is one `harness` job (its own ranks,
warm-up, timed steps; the slowest rank's median step time; peak memory from the profiler's
allocation events). Jobs run one after another, so on a shared machine their times carry
the load of whatever else runs then; the best of its BENCH_ROUNDS rounds (tests/bench/rounds.py,
at least 3) times BENCH_REPEATS (default 1) is kept.
test_interleaved_step_times: every engine in one process group, stepped in turn, so load
falls on all alike; the time comparison to trust on a shared machine. Its floor is yafsdp
against the unsharded step (`local`). Each step also records the CPU time of a rank's
threads other than the main one (gloo's), which on a machine with a core per rank take
time from the other rank's compute. BENCH_ENGINE_REVS="<git rev> ..." adds each revision's
yafsdp engine (`yafsdp@<rev>`) to the same run.
test_native_vs_hf_interleaved: yafsdp and fsdp2 on the native Llama and on HF's
LlamaForCausalLM of the same shapes (model_impl=hf), llama_small at seq 1024, stepped in
turn in one process group: step time and each step's allocation peak.

    make bench      # or: pytest tests/bench/test_engine_speed.py --benchmark-enable -s
"""

from __future__ import annotations

import functools
import itertools
import os
from pathlib import Path

import pytest
import torch
from tabulate import tabulate

from harness.config import JobConfig, ProfileConfig
from harness.engines.registry import ENGINES
from harness.job.run import run_job
from harness.rank.metrics import measure_matmul_peak_flops

# At module level, so that make test (which collects benchmarks but skips them) fails on
# an import a benchmark needs.
from tests.bench.interleaved import interleaved_runs, interleaved_step_times
from tests.bench.rounds import ROUNDS, median_by_label
from tests.distributed import run_on_ranks
from tests.rank.training import shared_test_engines

SEQ_LENS = (256, 1024)
REPEATS = int(os.environ.get("BENCH_REPEATS", "1"))
_ROUND = itertools.count()  # each round's jobs in directories of their own


@functools.cache
def bench_dtype() -> str:
    """BENCH_DTYPE, or bf16 where this CPU runs bf16 matmuls at half its fp32 rate or more."""
    if chosen := os.environ.get("BENCH_DTYPE"):
        return chosen
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each benchmark rank runs
    try:
        rates = {d: measure_matmul_peak_flops(d) for d in ("bf16", "fp32")}
    finally:
        torch.set_num_threads(threads)
    chosen = "bf16" if rates["bf16"] >= rates["fp32"] / 2 else "fp32"
    print(
        f"\nBENCH_DTYPE={chosen}: one-thread matmul bf16 {rates['bf16'] / 1e9:.1f} GFLOP/s, "
        f"fp32 {rates['fp32'] / 1e9:.1f} GFLOP/s (set BENCH_DTYPE to choose)"
    )
    return chosen


def _job(engine: str, seq_len: int) -> JobConfig:
    return JobConfig(
        model="llama_small",
        engine=ENGINES[engine].config(),
        gpus=2,
        seq_len=seq_len,
        dtype=bench_dtype(),
        warmup_steps=2,
        steps=5,
        threads_per_rank=1,
        profile=ProfileConfig(steps=0),
    )


def _measure(root: Path, best: dict[tuple[str, int], dict[str, float]]) -> None:
    """One round: every configuration REPEATS times, the fastest of all rounds kept in `best`."""
    n = next(_ROUND)
    for rep in range(REPEATS):
        for seq in SEQ_LENS:
            for engine in shared_test_engines():
                result = run_job(_job(engine, seq), root / f"{engine}-{seq}-{n}-{rep}").result
                assert result.status == "ok", result.error
                m = result.metrics
                row = {
                    "iteration_s": m.iteration_time_s,
                    "peak_gib": m.peak_memory_allocated_bytes / 2**30,
                    "rss_gib": m.peak_rss_bytes / 2**30,
                    "breakdown": m.memory_breakdown,
                }
                old = best.get((engine, seq))
                if old is None or row["iteration_s"] < old["iteration_s"]:
                    best[(engine, seq)] = row


@pytest.mark.slow
def test_yafsdp_speed_and_memory(benchmark, tmp_path: Path) -> None:
    best: dict[tuple[str, int], dict[str, float]] = {}
    benchmark.pedantic(_measure, args=(tmp_path, best), rounds=ROUNDS, iterations=1)
    benchmark.extra_info["dtype"] = bench_dtype()
    rows = []
    for (engine, seq), row in sorted(best.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        ratio_fsdp2 = row["iteration_s"] / best[("fsdp2", seq)]["iteration_s"]
        ratio_local = row["iteration_s"] / best[("local", seq)]["iteration_s"]
        ratios = [ratio_fsdp2, ratio_local]
        rows.append([seq, engine, row["iteration_s"], *ratios, row["peak_gib"], row["rss_gib"]])
        benchmark.extra_info[f"{engine}_{seq}"] = row
    print()
    header = ["seq", "engine", "iter s", "/fsdp2", "/local", "peak GiB", "RSS GiB"]
    print(tabulate(rows, headers=header))
    for seq in SEQ_LENS:
        mib = {k: round(v / 2**20, 1) for k, v in best[("yafsdp", seq)]["breakdown"].items()}
        print(f"yafsdp engine-held MiB at seq {seq}: {mib}")
    missed = []  # every floor is checked, so one miss does not hide another
    for seq in SEQ_LENS:
        ya, f2 = best[("yafsdp", seq)], best[("fsdp2", seq)]
        if not ya["iteration_s"] <= 0.85 * f2["iteration_s"]:
            missed.append(
                f"seq {seq}: yafsdp/fsdp2 time {ya['iteration_s'] / f2['iteration_s']:.3f}"
            )
        if not ya["peak_gib"] < f2["peak_gib"]:
            missed.append(f"seq {seq}: peak {ya['peak_gib']:.3f} GiB >= fsdp2 {f2['peak_gib']:.3f}")
    ya, local = best[("yafsdp", 1024)], best[("local", 1024)]
    if not ya["iteration_s"] <= 1.15 * local["iteration_s"]:
        missed.append(f"seq 1024: yafsdp/local time {ya['iteration_s'] / local['iteration_s']:.3f}")
    assert not missed, "floors missed: " + "; ".join(missed)


# yafsdp's step against the unsharded step (`local`: the same per-rank batch and threads),
# interleaved: the most it may take, by sequence length.
YAFSDP_OVER_LOCAL = {256: 1.05, 1024: 1.02}
# BENCH_ENGINE_REVS="<rev> ...": each git revision's yafsdp engine runs beside this tree's
# in the same process group (`yafsdp@<rev>`), for a before/after from one run.
REVISIONS = tuple(os.environ.get("BENCH_ENGINE_REVS", "").split())


@pytest.mark.slow
@pytest.mark.parametrize("seq_len", SEQ_LENS)
def test_interleaved_step_times(benchmark, seq_len: int) -> None:
    """Every engine in one process group, stepped in turn; yafsdp against local."""
    args = ("llama_small", seq_len, 5, 2, bench_dtype(), REVISIONS)
    runs: list[dict] = []
    benchmark.pedantic(
        lambda: runs.append(run_on_ranks(interleaved_step_times, 2, *args, start_method="fork")[0]),
        rounds=ROUNDS,
        iterations=1,
    )
    measured = median_by_label(runs)
    benchmark.extra_info.update(measured)
    benchmark.extra_info["dtype"] = bench_dtype()
    times = {label: m["step_s"] for label, m in measured.items()}
    rows = [
        [label, t, t / times["fsdp1"], t / times["fsdp2"], t / times["local"],
         measured[label]["other_threads_cpu_s"]]
        for label, t in times.items()
    ]  # fmt: skip
    headers = [f"seq {seq_len}", "step s", "/fsdp1", "/fsdp2", "/local", "gloo threads CPU s"]
    print()
    print(tabulate(rows, headers=headers))
    ratio = times["yafsdp"] / times["local"]
    assert ratio <= YAFSDP_OVER_LOCAL[seq_len], f"yafsdp/local {ratio:.3f}"


# yafsdp and fsdp2, each on the native Llama and on transformers' LlamaForCausalLM.
IMPL_RUNS = {f"{e} {impl}": (e, impl) for e in ("yafsdp", "fsdp2") for impl in ("native", "hf")}


@pytest.mark.slow
def test_native_vs_hf_interleaved(benchmark) -> None:
    """The same shapes and engine, two model implementations, stepped in turn."""
    pytest.importorskip("transformers")

    args = ("llama_small", 1024, 5, 2, bench_dtype(), IMPL_RUNS, True)
    runs: list[dict] = []
    benchmark.pedantic(
        lambda: runs.append(run_on_ranks(interleaved_runs, 2, *args, start_method="fork")[0]),
        rounds=ROUNDS,
        iterations=1,
    )
    measured = median_by_label(runs)
    benchmark.extra_info.update(measured)
    benchmark.extra_info["dtype"] = bench_dtype()
    rows = []
    for label, (engine, _) in IMPL_RUNS.items():
        m, native = measured[label], measured[f"{engine} native"]
        time_ratio = m["step_s"] / native["step_s"]
        peak_ratio = m["step_peak_bytes"] / native["step_peak_bytes"]
        rows.append([label, m["step_s"], time_ratio, m["step_peak_bytes"] / 2**20, peak_ratio])
    print()
    print(tabulate(rows, headers=["seq 1024", "step s", "/native", "step peak MiB", "/native"]))
    # The same model with the same attention kernel (SDPA): in fp32 their step peaks
    # agreed within 2% and times within 4% (one run on a loaded 2-core machine). HF's eager
    # attention would keep each layer's (heads x seq x seq) fp32 scores for backward, by
    # arithmetic 8 layers x 32 MiB beside a measured step peak of about 850 MiB: a wrong
    # kernel shows as more than 10%.
    for engine in ("yafsdp", "fsdp2"):
        hf, native = measured[f"{engine} hf"], measured[f"{engine} native"]
        assert 0.9 <= hf["step_peak_bytes"] / native["step_peak_bytes"] <= 1.1, engine
        assert 0.75 <= hf["step_s"] / native["step_s"] <= 1.33, engine
