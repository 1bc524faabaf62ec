"""A step, attributed: synthetic Kineto traces with one injected cause of known size each.

Every trace runs the same two-unit training step three times (`kineto_program` simulates
the GPU); the second step carries one injected cause. The attribution must find it under the right
name: the second step's cause minus the first's equals the injected size within 1% of the
step, and every other cause stays where it was.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.trace import summarize_trace
from harness.trace.__main__ import main
from harness.trace.diagnose import causes as C
from harness.trace.diagnose.attribute import StepAttribution
from harness.trace.jobs import attribute_trace
from tests.trace.kineto_program import (
    ALL_GATHER,
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
    write_program,
)  # fmt: skip

N = 1 << 20  # every collective's element count
COMPUTE, COMM, SIDE = 7, 20, 30  # streams


def _step(inject: str = "", size: float = 0.0) -> list[Op]:
    """Forward: gather each unit's weights, then compute on them (one weight buffer, so unit
    1's gather waits for unit 0's compute: every gather is exposed). Backward: compute, then cast
    the gradients on a side stream and reduce-scatter them. The optimizer waits for every
    reduce-scatter; the step ends in a device synchronisation."""
    ops: list[Op] = []
    for u in (0, 1):
        ag = 80.0 + (size if inject == "slow_collective" and u == 1 else 0.0)
        buffer_free = ("f0",) if u == 1 else ()  # one weight buffer: unit 0 must be done
        ops.append(
            Range(
                f"yafsdp.all_gather.layers.{u}",
                [Launch(ALL_GATHER, COMM, ag, key=f"ag{u}", waits=buffer_free, nelems=N)],
            )
        )
        ops.append(
            Range(
                f"yafsdp.forward.layers.{u}",
                [
                    Launch(GEMM, COMPUTE, 150.0, waits=(f"ag{u}",)),
                    Launch(ELEMENTWISE, COMPUTE, 30.0, key=f"f{u}"),
                ],
            )
        )
    for u in (1, 0):
        if u == 0:  # the host waits for the device here in every step, the stall after it
            ops.append(Sync("cudaStreamSynchronize"))
            if inject == "host_stall":
                ops.append(Host("aten::_local_scalar_dense", size))
            if inject == "allocator":
                ops.append(Host("cudaMalloc", size, cat="cuda_runtime"))
        ops.append(
            Range(
                f"yafsdp.backward.layers.{u}",
                [Launch(GEMM, COMPUTE, 300.0), Launch(ELEMENTWISE, COMPUTE, 40.0, key=f"g{u}")],
            )
        )
        chain = [20.0] if not (inject == "side_chain" and u == 0) else [20.0 + size / 4] * 4
        casts = [Launch(CAST, SIDE, d, key=f"c{u}", waits=(f"g{u}",)) for d in chain]
        ops.append(
            Range(
                f"yafsdp.reduce_scatter.layers.{u}",
                [
                    *casts,
                    Launch(REDUCE_SCATTER, COMM, 120.0, key=f"rs{u}", waits=(f"c{u}",), nelems=N),
                ],
            )
        )
    ops.append(
        Range(
            "Optimizer.step#AdamW.step",
            [Launch(OPTIMIZER_KERNEL, COMPUTE, 60.0, waits=("rs0", "rs1"))],
        )
    )
    ops.append(Sync())
    return ops  # fmt: skip


def _attributed(tmp_path: Path, inject: str, size: float) -> list[StepAttribution]:
    path = write_program(tmp_path / f"{inject}.json.gz", [_step(), _step(inject, size), _step()])
    steps = attribute_trace(path)
    assert [s.step for s in steps] == [1, 2, 3]
    return steps[:2]


# (injection, its size in us, the cause it must land in, how much of it: the side chain
# replaces one 20 us cast by four kernels of 20 + size/4 us, so it adds size + 60 us)
CASES = {
    "host_stall": (400.0, C.HOST_OTHER, 400.0),
    "allocator": (250.0, C.HOST_ALLOCATOR, 250.0),
    "slow_collective": (300.0, C.COMM_SLOW, 300.0),
    "side_chain": (200.0, C.ENGINE, 260.0),
}


@pytest.mark.parametrize("inject", sorted(CASES))
def test_injected_cause_is_recovered(tmp_path, inject):
    size, cause, expected = CASES[inject]
    clean, injected = _attributed(tmp_path, inject, size)
    grown = injected.causes[cause] - clean.causes[cause]
    print(f"{inject}: injected {expected:.0f} us, {cause} grew {grown * 1e6:.1f} us")
    assert grown * 1e6 == pytest.approx(expected, abs=0.01 * injected.step_s * 1e6)
    # nothing else moved by more than 1% of the step
    for other in C.ORDER:
        if other != cause:
            moved = injected.causes[other] - clean.causes[other]
            assert abs(moved) <= 0.01 * injected.step_s, (other, moved)
    assert injected.step_s - clean.step_s == pytest.approx(expected * 1e-6, abs=1e-9)


def test_clean_step_term_by_term(tmp_path):
    """The clean step's figures, from the simulated program by hand."""
    (clean, _) = _attributed(tmp_path, "host_stall", 0.0)
    ms = {c: round(v * 1e6, 3) for c, v in clean.causes.items() if v}
    # forward: 2 x (150 + 30) of GEMM and elementwise, backward 2 x (300 + 40)
    assert ms[C.COMPUTE_GEMM_ATTENTION] == pytest.approx(2 * 150 + 2 * 300)
    assert ms[C.COMPUTE_OTHER] == pytest.approx(2 * 30 + 2 * 40)
    assert ms[C.OPTIMIZER] == pytest.approx(60)
    assert ms[C.COMM_ALL_GATHER] == pytest.approx(2 * 80)
    assert ms[C.UNATTRIBUTED] == pytest.approx(0, abs=1e-6)
    assert sum(clean.causes.values()) == pytest.approx(clean.step_s, abs=1e-12)


@pytest.mark.parametrize("inject", sorted(CASES))
def test_exposed_comm_equals_the_summary(tmp_path, inject):
    size = CASES[inject][0]
    path = write_program(tmp_path / "t.json.gz", [_step(), _step(inject, size), _step()])
    summary = {r["step"]: r for r in summarize_trace(path)["steps"]}
    for s in attribute_trace(path):
        exposed = sum(s.causes[c] for c in C.EXPOSED_COMM)
        assert exposed == pytest.approx(summary[s.step]["exposed_comm_s"], abs=1e-12)
        assert s.step_s == pytest.approx(summary[s.step]["window_s"], abs=1e-12)


def test_units_of_engine_work_and_collectives(tmp_path):
    clean, injected = _attributed(tmp_path, "side_chain", 200.0)
    assert set(injected.by_unit[C.ENGINE]) == {"layers.0", "layers.1"}
    grown = injected.by_unit[C.ENGINE]["layers.0"] - clean.by_unit[C.ENGINE]["layers.0"]
    assert grown == pytest.approx(260e-6)  # the chain was unit 0's
    assert sum(injected.by_unit[C.ENGINE].values()) == pytest.approx(injected.causes[C.ENGINE])
    ag = injected.by_unit[C.COMM_ALL_GATHER]
    assert set(ag) <= {"layers.0", "layers.1"} and sum(ag.values()) == pytest.approx(
        injected.causes[C.COMM_ALL_GATHER]
    )


def test_cli_table_and_json(tmp_path, capsys):
    path = write_program(tmp_path / "rank0.json.gz", [_step(), _step("allocator", 250.0)])
    assert main(["attribute", str(path), "--step", "2"]) == 0
    out = capsys.readouterr().out
    assert "rank 0, step 2" in out and "| host.allocator | 0.250 |" in out
    assert main(["attribute", str(path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["rank"], r["step"]) for r in rows] == [(0, 1), (0, 2)]
    for r in rows:
        assert sum(r["causes"].values()) == pytest.approx(r["step_s"], abs=1e-12)
        assert set(r["causes"]) == set(C.ORDER)


@pytest.mark.parametrize(
    "content, message",
    [(None, "no such trace file or job directory"), ('{"a": 1}', "not a Chrome trace")],
)
def test_cli_bad_input_is_one_line_and_nonzero(tmp_path, capsys, content, message):
    path = tmp_path / "rank0.json"
    if content is not None:
        path.write_text(content)
    assert main(["attribute", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err and str(path) in err


def test_cli_job_dir_without_traces(tmp_path, capsys):
    assert main(["attribute", str(tmp_path)]) == 2
    assert "no rank<r>.json[.gz] trace files" in capsys.readouterr().err


def test_the_stall_is_named_by_its_cpu_operator(tmp_path):
    clean, injected = _attributed(tmp_path, "host_stall", 400.0)
    assert "aten::_local_scalar_dense" not in clean.host_ops
    assert injected.host_ops["aten::_local_scalar_dense"] == pytest.approx(400e-6)
    assert next(iter(injected.host_ops)) == "aten::_local_scalar_dense"  # the largest first


def test_cli_default_is_one_table_the_mean_over_ranks_and_steps(tmp_path, capsys):
    path = write_program(tmp_path / "rank0.json.gz", [_step(), _step("allocator", 250.0)])
    assert main(["attribute", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.count("| cause |") == 1
    assert out.startswith("mean of 2 steps (rank 0; steps 1, 2)")
    assert "| host.allocator | 0.125 |" in out  # 0.250 ms in one of two steps
    assert main(["attribute", str(path), "--each"]) == 0
    assert capsys.readouterr().out.count("| cause |") == 2
    assert main(["attribute", str(path), "--rank", "3"]) == 2
    assert "no profiled step with --rank 3" in capsys.readouterr().err
