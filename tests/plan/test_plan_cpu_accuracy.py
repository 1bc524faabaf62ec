"""The planner's per-rank peak against the CPU allocator's, for every engine: llama_mini on 2
gloo ranks at seq 128 and 512 (fp32, as CPU runs go), with checkpointing (ckpt_layers 0
and 1), where its share of the peak is the larger; llama_small at seq 128, also in bf16
for the engines the published comparison has (yafsdp, fsdp1, fsdp2); and on llama_mini at
seq 128 in fp32 and bf16, every yafsdp buffer plan.

One process group runs every case in turn (each engine the shared tests train:
`shared_test_engines`), each built and stepped as a job's memory-
tracked phase is (build, two steps: the second holds AdamW's moments)."""

from __future__ import annotations

import itertools

import pytest

from harness.config import NAMED_BUFFER_PLANS, JobConfig
from harness.engines.registry import ENGINES
from harness.plan.memory.model import estimate_memory
from harness.plan.planner import memory_case
from tests.distributed import run_on_ranks
from tests.plan.cpu_peaks import measure
from tests.rank.training import shared_test_engines

TOLERANCE = 0.05
# The suite's largest single cost, so checkpointing and the longer sequence are measured on
# llama_mini only: checkpointing's share of the peak is larger there than on llama_small
# (whose ckpt_layers=1 peaks were 0.7-2.0% below ckpt_layers=0 when both were measured), and
# llama_small at seq 512, the costliest cases, was within the tolerance for every engine
# whenever it ran here.
POINTS = [("llama_mini", s, c) for s, c in itertools.product((128, 512), (0, 1))]
POINTS += [("llama_small", 128, 0)]
CASES = [
    {"model": m, "seq_len": s, "ckpt_layers": c, "engine": e}
    for (m, s, c), e in itertools.product(POINTS, shared_test_engines())
]
SMALL = {"model": "llama_small", "seq_len": 128, "ckpt_layers": 0}
CASES += [{**SMALL, "engine": e, "dtype": "bf16"} for e in ("yafsdp", "fsdp1", "fsdp2")]
# The buffer plans on llama_mini: a quarter of llama_small's cost, and its plans' peaks
# still differ by a third. On llama_small the plans were within 1.6% of their predictions.
MINI = {"model": "llama_mini", "seq_len": 128, "ckpt_layers": 0}
CASES += [
    {**MINI, "engine": "yafsdp", "dtype": d, "buffer_plan": plan}
    for d, plan in itertools.product(("fp32", "bf16"), NAMED_BUFFER_PLANS)
]


# Cases per process group: a rank's memory grows with each case it has traced (one held
# 5.7 GiB after the 30 cases in one group, and was killed on a 23 GiB machine).
CASES_PER_GROUP = 12


@pytest.fixture(scope="module")
def measured() -> list[int]:
    peaks = []
    for i in range(0, len(CASES), CASES_PER_GROUP):
        per_rank = run_on_ranks(measure, 2, CASES[i : i + CASES_PER_GROUP])
        peaks += [max(p) for p in zip(*per_rank, strict=True)]
    return peaks


def test_predicted_peak_is_within_5_percent_of_measured(measured: list[int]) -> None:
    lines, misses = [], []
    for case, peak in zip(CASES, measured, strict=True):
        engine = ENGINES[case["engine"]].config()
        engine.buffer_plan = case.get("buffer_plan", engine.buffer_plan)
        cfg = JobConfig(model=case["model"], seq_len=case["seq_len"], gpus=2,
                        dtype=case.get("dtype", "fp32"), ckpt_layers=case["ckpt_layers"],
                        device="cpu", engine=engine)  # fmt: skip
        predicted = estimate_memory(memory_case(cfg)).peak_bytes  # yafsdp: its budget's plan
        error = predicted / peak - 1
        line = (
            f"{case['model']:11} seq {case['seq_len']:3} ckpt {case['ckpt_layers']} "
            f"{case.get('dtype', 'fp32')} {case['engine']:11} {case.get('buffer_plan', ''):16} "
            f"measured {peak / 2**20:7.1f} MiB  predicted "
            f"{predicted / 2**20:7.1f} MiB  {100 * error:+5.1f}%"
        )
        lines.append(line)
        if abs(error) > TOLERANCE:
            misses.append(line)
    print("\n" + "\n".join(lines))
    assert not misses, "predicted peak off by more than the tolerance:\n" + "\n".join(misses)
