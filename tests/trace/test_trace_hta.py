"""Our overlap % agrees with HolisticTraceAnalysis' get_comm_comp_overlap on GPU traces."""

import random

import pytest

from harness.trace import summarize_trace
from tests.trace.synthetic import Kernel, nccl, write_gpu_trace

hta = pytest.importorskip("hta.trace_analysis")

MEMCPY = "Memcpy DtoD (Device -> Device)"


def _two_steps(kernels: list[Kernel], period: int = 1000) -> list[Kernel]:
    """The same step twice (HTA warns on single-step traces)."""
    return [k._replace(step=s, start=k.start + (s - 1) * period) for s in (1, 2) for k in kernels]


def _random(seed: int) -> list[Kernel]:
    rng = random.Random(seed)
    ks = []
    for step in (1, 2, 3):
        t0 = step * 10_000
        for _ in range(40):
            start, dur = t0 + rng.randrange(8000), rng.randrange(1, 400)
            ks.append(Kernel(step, rng.choice([7, 8]), start, dur))
        for _ in range(12):
            start, dur = t0 + rng.randrange(8000), rng.randrange(1, 900)
            ks.append(nccl(step, rng.choice([20, 24]), start, dur))
    return ks


CASES = {
    "overlapping": _two_steps([Kernel(1, 7, 0, 100), nccl(1, 20, 50, 100), Kernel(1, 7, 200, 50)]),
    "back_to_back": _two_steps(
        [Kernel(1, 7, 0, 100), nccl(1, 20, 100, 100), Kernel(1, 7, 200, 50), nccl(1, 20, 250, 30)]
    ),
    "nested": _two_steps(
        [
            Kernel(1, 7, 0, 300),
            Kernel(1, 8, 50, 50),
            nccl(1, 20, 100, 50),
            nccl(1, 21, 110, 20),
            nccl(1, 20, 280, 100),
        ]
    ),  # fmt: skip
    "no_overlap": _two_steps([Kernel(1, 7, 0, 100), nccl(1, 20, 150, 100)]),
    "multi_stream": _two_steps(
        [
            Kernel(1, 7, 0, 120),
            Kernel(1, 8, 60, 120),
            Kernel(1, 9, 400, 40),
            nccl(1, 20, 30, 80),
            nccl(1, 21, 150, 100),
            nccl(1, 22, 390, 30),
            Kernel(1, 10, 500, 50, MEMCPY),
            nccl(1, 20, 520, 60),
        ]
    ),  # fmt: skip
    "random_a": _random(1),
    "random_b": _random(2),
}


def _hta_overlap_pct(trace_dir) -> dict[int, float]:
    analysis = hta.TraceAnalysis(trace_dir=str(trace_dir), include_last_profiler_step=True)
    df = analysis.get_comm_comp_overlap(visualize=False)
    return dict(zip(df["rank"], df["comp_comm_overlap_pctg"], strict=True))


@pytest.mark.parametrize("case", sorted(CASES))
def test_overlap_pct_matches_hta(tmp_path, case):
    path = write_gpu_trace(tmp_path / "rank0.json.gz", CASES[case], rank=0)
    ours = summarize_trace(path)["summary"]["overlap_pct"]
    theirs = _hta_overlap_pct(tmp_path)[0]
    print(f"{case}: ours {ours:.2f}%, HTA {theirs:.2f}%")
    assert ours == pytest.approx(theirs, abs=0.5)


def test_expected_values_for_the_simple_cases(tmp_path):
    """Anchors: a wrong classification common to both tools would still fail here."""
    expected = {"overlapping": 50.0, "back_to_back": 0.0, "nested": 100 * 70 / 150,
                "no_overlap": 0.0}  # fmt: skip
    for case, pct in expected.items():
        path = write_gpu_trace(tmp_path / case / "rank0.json.gz", CASES[case])
        assert summarize_trace(path)["summary"]["overlap_pct"] == pytest.approx(pct)


def test_several_ranks_in_one_directory(tmp_path):
    for rank, case in enumerate(["overlapping", "multi_stream"]):
        write_gpu_trace(tmp_path / f"rank{rank}.json.gz", CASES[case], rank=rank, world_size=2)
    theirs = _hta_overlap_pct(tmp_path)
    for rank in (0, 1):
        ours = summarize_trace(tmp_path / f"rank{rank}.json.gz")["summary"]["overlap_pct"]
        assert ours == pytest.approx(theirs[rank], abs=0.5)
