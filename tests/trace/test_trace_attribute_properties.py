"""Properties of the attribution on random programs run on the simulated GPU: the causes
sum to the step, a launch made later by d adds exactly d to the host's wait, and a collective
that runs wholly under computation can take longer without changing anything."""

from __future__ import annotations

import random

import numpy as np
import pytest

from harness.trace import summarize_trace
from harness.trace.diagnose import causes as C
from harness.trace.diagnose.attribute import StepAttribution
from harness.trace.jobs import attribute_trace
from harness.trace.overlap import merge
from tests.trace.kineto_program import (
    ALL_GATHER,
    ALL_REDUCE,
    CAST,
    ELEMENTWISE,
    GEMM,
    OPTIMIZER_KERNEL,
    REDUCE_SCATTER,
    Host,
    Launch,
    Op,
    Range,
    Sync,
    simulate,
    write_program,
)  # fmt: skip
from tests.trace.synthetic import write_gpu_trace

SEEDS = range(8)
NCCL = (ALL_GATHER, REDUCE_SCATTER, ALL_REDUCE)


def _random_step(rng: random.Random, step: int) -> list[Op]:
    ops: list[Op] = []
    keys: list[str] = []

    def launch() -> Launch:
        key = f"s{step}k{len(keys)}"
        waits = (rng.choice(keys),) if keys and rng.random() < 0.3 else ()
        keys.append(key)
        if rng.random() < 0.3:
            name = rng.choice(NCCL)
            return Launch(name, rng.choice([20, 24]), rng.uniform(10, 300), key, waits,
                          nelems=rng.choice([1 << 16, 1 << 20]))  # fmt: skip
        name = rng.choice([GEMM, ELEMENTWISE, CAST])
        return Launch(name, rng.choice([7, 7, 8]), rng.uniform(5, 250), key, waits)

    for _ in range(rng.randrange(15, 30)):
        r = rng.random()
        if r < 0.6:
            ops.append(launch())
        elif r < 0.75:
            name = rng.choice(["aten::empty", "cudaMalloc", "cudaFree"])
            cat = "cpu_op" if name.startswith("aten") else "cuda_runtime"
            ops.append(Host(name, rng.uniform(1, 80), cat))
        elif r < 0.8:
            ops.append(Sync(rng.choice(["cudaDeviceSynchronize", "cudaStreamSynchronize"])))
        else:
            name = rng.choice(["yafsdp.reduce_scatter.layers.2", "yafsdp.all_gather.unit1",
                               "Optimizer.step#AdamW.step", "yafsdp.forward.layers.0"])  # fmt: skip
            ops.append(Range(name, [launch() for _ in range(rng.randrange(1, 4))]))
    ops.append(Launch(OPTIMIZER_KERNEL, 7, 20.0))
    return ops


def _program(seed: int) -> list[list[Op]]:
    rng = random.Random(seed)
    return [_random_step(rng, s) for s in (1, 2, 3)]


def _totals(steps: list[StepAttribution]) -> dict[str, float]:
    return {c: sum(s.causes[c] for s in steps) for c in C.ORDER}


@pytest.mark.parametrize("seed", SEEDS)
def test_causes_sum_to_the_step_and_comm_to_the_summary(tmp_path, seed):
    path = write_program(tmp_path / "rank0.json.gz", _program(seed))
    steps = attribute_trace(path)
    summary = {r["step"]: r for r in summarize_trace(path)["steps"]}
    assert [s.step for s in steps] == [1, 2, 3]
    for s in steps:
        assert sum(s.causes.values()) == pytest.approx(s.step_s, abs=1e-12)
        assert all(v >= 0 for c, v in s.causes.items() if c != C.UNATTRIBUTED)
        assert abs(s.causes[C.UNATTRIBUTED]) < 1e-9  # every launch is in the trace
        exposed = sum(s.causes[c] for c in C.EXPOSED_COMM)
        assert exposed == pytest.approx(summary[s.step]["exposed_comm_s"], abs=1e-12)
        for cause, units in s.by_unit.items():
            assert sum(units.values()) <= s.causes[cause] + 1e-12


@pytest.mark.parametrize("seed", SEEDS)
def test_a_launch_later_by_d_adds_d_to_host_wait(tmp_path, seed):
    """After a synchronisation the device has drained, so holding the host for d there
    delays the next launch, and everything after it, by exactly d."""
    rng = random.Random(1000 + seed)
    program = _program(seed)
    step = rng.choice([1, 2])  # step index 1 or 2: a launch always precedes the stall
    at = rng.randrange(0, len(program[step]))
    d = rng.uniform(50, 500)
    base = [list(ops) for ops in program]
    late = [list(ops) for ops in program]
    base[step][at:at] = [Sync()]
    late[step][at:at] = [Sync(), Host("aten::_local_scalar_dense", d)]
    before = _totals(attribute_trace(write_program(tmp_path / "a.json.gz", base)))
    after = _totals(attribute_trace(write_program(tmp_path / "b.json.gz", late)))
    assert after[C.HOST_OTHER] - before[C.HOST_OTHER] == pytest.approx(d * 1e-6, abs=1e-9)
    for cause in C.ORDER:
        if cause != C.HOST_OTHER:
            assert after[cause] == pytest.approx(before[cause], abs=1e-9), cause


def _hidden_collectives(kernels, room: float) -> list[int]:
    """NCCL kernels that computation covers from their start to `room` us past their end."""
    compute = [k for k in kernels if not k.name.startswith("nccl")]
    busy = merge(np.array([k.start for k in compute]), np.array([k.start + k.dur for k in compute]))
    out = []
    for i, k in enumerate(kernels):
        if k.name.startswith("nccl"):
            j = np.searchsorted(busy.start, k.start, side="right") - 1
            if j >= 0 and busy.end[j] >= k.start + k.dur + room:
                out.append(i)
    return out


def test_lengthening_a_hidden_collective_changes_nothing(tmp_path):
    checked = 0
    for seed in range(40):
        kernels, spans = simulate(_program(seed))
        for i in _hidden_collectives(kernels, room=30.0):
            # its own size, so that it is no other collective's yardstick
            alone = list(kernels)
            alone[i] = alone[i]._replace(nelems=7919 + i)
            longer = list(alone)
            longer[i] = longer[i]._replace(dur=longer[i].dur + 30.0)
            a = attribute_trace(write_gpu_trace(tmp_path / "a.json.gz", alone, spans=spans))
            b = attribute_trace(write_gpu_trace(tmp_path / "b.json.gz", longer, spans=spans))
            for x, y in zip(a, b, strict=True):
                assert x.step_s == y.step_s
                for cause in C.ORDER:
                    assert x.causes[cause] == pytest.approx(y.causes[cause], abs=1e-12)
                assert x.by_unit.keys() == y.by_unit.keys()
                for cause, units in x.by_unit.items():
                    assert units == pytest.approx(y.by_unit[cause], abs=1e-12)
            checked += 1
        if checked >= 5:
            break
    assert checked >= 5, "too few hidden collectives in the random programs"
