"""The one-GPU give-way probe: its arithmetic on hand-built traces, the file it writes, that
`calibration=` reads it back, and its refusal without CUDA (this machine has none)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.plan.calibrate.calibration import calibration_from
from harness.plan.calibrate.give_way_delays import (
    Session,
    Span,
    calibration_document,
    constants_from,
    gemm_waves,
    kernel_spans,
    launches_per_chain,
    start_delays,
    write_calibration,
)
from harness.plan.probe.cli import main as probe_main
from harness.plan.time.give_way import GiveWayConstants

COMPUTE, SIDE = 7, 13


def _event(name: str, stream: int, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur,
            "args": {"stream": stream, "device": 0}}  # fmt: skip


def _gemms(start: float, count: int, dur: float) -> list[dict]:
    return [_event("sm90_gemm", COMPUTE, start + i * dur, dur) for i in range(count)]


def test_kernel_spans_keep_gpu_kernels_only_in_time_order() -> None:
    trace = {"traceEvents": [
        _event("b", SIDE, 50.0, 5.0),
        _event("a", COMPUTE, 10.0, 20.0),
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0.0, "dur": 3.0, "args": {}},
        {"ph": "i", "cat": "kernel", "name": "instant", "ts": 1.0, "args": {"stream": 7}},
    ]}  # fmt: skip
    assert kernel_spans(trace) == [Span("a", COMPUTE, 10.0, 30.0), Span("b", SIDE, 50.0, 55.0)]


def test_a_side_kernel_ready_mid_gemm_at_equal_priority_waits_for_its_end() -> None:
    """Rule 1 by hand: a 3 ms GEMM from 0; the spin ends at 1 ms; the 1 ms cast starts at
    3 ms (the GEMM's end): it waited 2 ms, all of the GEMM's 2 ms left. The divide after it
    becomes ready at 4 ms, when the next GEMM (started 4 ms) holds the SMs: it waits for it."""
    trace = {"traceEvents": [
        _event("at::cuda::spin_kernel(long)", SIDE, 0.0, 1000.0),
        _event("sm90_gemm", COMPUTE, 0.0, 3000.0),
        _event("cast", SIDE, 3000.0, 1000.0),
        _event("sm90_gemm", COMPUTE, 4000.0, 3000.0),
        _event("div", SIDE, 7000.0, 1000.0),
    ]}  # fmt: skip
    cast, div = start_delays(kernel_spans(trace))
    assert (cast.kernel, cast.position, cast.ready_us, cast.wait_us) == ("cast", 0, 1000.0, 2000.0)
    assert cast.blocker == Span("sm90_gemm", COMPUTE, 0.0, 3000.0)
    assert cast.share_of_remaining() == pytest.approx(1.0)
    # the divide became ready at the cast's end (4 ms), as the second GEMM took the SMs
    assert (div.position, div.ready_us, div.wait_us) == (1, 4000.0, 3000.0)
    assert div.blocker is not None and div.blocker.start_us == 4000.0
    assert div.share_of_remaining() == pytest.approx(1.0)


def test_a_high_priority_kernel_waits_in_waves_of_the_running_gemm() -> None:
    """Rule 4 by hand: a 3 ms GEMM of 6 waves (0.5 ms each); the -1 cast ready at 1.2 ms
    starts at 1.5 ms, when the running wave retires: 0.3 ms = 0.6 of a wave."""
    trace = {"traceEvents": [
        _event("spin_kernel", SIDE, 0.0, 1200.0), *_gemms(0.0, 2, 3000.0),
        _event("cast", SIDE, 1500.0, 1000.0),
    ]}  # fmt: skip
    (cast,) = start_delays(kernel_spans(trace))
    assert cast.in_waves(6) == pytest.approx(0.6)
    assert cast.share_of_remaining() == pytest.approx(300 / 1800)


def test_a_side_kernel_with_no_compute_in_the_way_has_no_share() -> None:
    trace = {"traceEvents": [
        _event("spin_kernel", SIDE, 0.0, 1000.0), _event("sm90_gemm", COMPUTE, 0.0, 500.0),
        _event("cast", SIDE, 1010.0, 100.0),
    ]}  # fmt: skip
    (cast,) = start_delays(kernel_spans(trace))
    assert cast.blocker is None and cast.wait_us == pytest.approx(10.0)
    assert cast.share_of_remaining() is None and cast.in_waves(4) is None


def test_side_work_before_any_spin_kernel_is_not_a_sample() -> None:
    trace = {"traceEvents": [
        _event("warm", SIDE, 0.0, 10.0), _event("spin_kernel", SIDE, 20.0, 10.0),
        _event("cast", SIDE, 30.0, 10.0),
    ]}  # fmt: skip
    assert [d.kernel for d in start_delays(kernel_spans(trace))] == ["cast"]


def test_spin_kernels_on_two_streams_are_refused() -> None:
    spans = [Span("spin_kernel", 1, 0, 1), Span("spin_kernel", 2, 0, 1)]
    with pytest.raises(ValueError, match="on one stream"):
        start_delays(spans)


def test_a_session_reports_its_launches_per_trial() -> None:
    from harness.plan.calibrate.give_way_delays import summary

    (row,) = summary([Session("chain", 0, (1, 2, 3), 1, (), (4, 4, 2))])
    assert row["launches_per_trial"] == [2, 4] and row["gemm_mnk"] == [1, 2, 3]


def test_launches_per_chain_show_the_32_bit_split() -> None:
    chain = [Span(f"k{i}", SIDE, 2 + i, 3 + i) for i in range(4)]
    spans = [Span("spin_kernel", SIDE, 0, 1), *chain, Span("spin_kernel", SIDE, 10, 11),
             Span("k", SIDE, 12, 13)]  # fmt: skip
    assert launches_per_chain(spans) == [4, 1]


def test_gemm_waves_count_tiles_over_sms() -> None:
    # 8192 x 22016 in 128 x 256 tiles: 64 x 86 = 5504 tiles over 132 SMs: 42 waves
    assert gemm_waves(8192, 22016, (128, 256), 132) == 42
    assert gemm_waves(100, 100, (128, 256), 132) == 1


def _session(side: str, priority: int, waits: list[float], waves: int = 4) -> Session:
    """Samples behind a 1000 us GEMM, each ready 200 us into it (800 us left)."""
    delays = []
    for i, wait in enumerate(waits):
        t = i * 10_000.0
        trace = {"traceEvents": [
            _event("spin_kernel", SIDE, t, 200.0), _event("g", COMPUTE, t, 1000.0),
            _event("side", SIDE, t + 200.0 + wait, 50.0),
        ]}  # fmt: skip
        delays += start_delays(kernel_spans(trace))
    return Session(side, priority, (1, 1, 1), waves, tuple(delays))


def test_constants_are_the_medians_keyed_as_the_give_way_constants() -> None:
    sessions = [
        _session("chain", 0, [800.0, 800.0, 400.0]),  # shares 1, 1, 0.5
        _session("chain", -1, [250.0, 500.0, 100.0]),  # waves of 250 us: 1, 2, 0.4
        _session("collective", 0, [400.0]),
        _session("collective", -1, [125.0]),
    ]
    got = constants_from(sessions)
    assert got == pytest.approx({
        "equal_priority_wait": 1.0, "high_priority_wait_waves": 1.0,
        "collective_equal_priority_wait": 0.5, "collective_high_priority_wait_waves": 0.5,
    })  # fmt: skip
    with pytest.raises(ValueError, match="no constant"):
        constants_from([_session("chain", 3, [1.0])])


def test_the_file_it_writes_reads_back_through_calibration(tmp_path: Path) -> None:
    sessions = [_session("chain", 0, [400.0]), _session("chain", -1, [500.0])]
    doc = calibration_document(sessions, device="NVIDIA H200", sm_count=132,
                               torch_version="2.13.0", notes="hand-built")  # fmt: skip
    path = tmp_path / "give_way.json"
    write_calibration(path, doc)
    on_disk = json.loads(path.read_text())
    assert on_disk["give_way"]["samples"][0]["samples"] == 1
    assert on_disk["give_way"]["samples"][0]["launches_per_trial"] == []
    measured = calibration_from(path)
    assert measured.give_way == GiveWayConstants(
        equal_priority_wait=0.5, high_priority_wait_waves=2.0, sm_count=132
    )
    assert measured.collectives == () and measured.measured == ("give_way",)
    assert "give-way waits on NVIDIA H200" in measured.source


def test_a_bad_give_way_key_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"schema": "yafsdp-bench.calibration/1",
                                "give_way": {"equal_wait": 1.0}}))  # fmt: skip
    with pytest.raises(ValueError, match=r"bad.json.*give_way.equal_wait"):
        calibration_from(path)


def test_without_cuda_the_probe_refuses_clearly(tmp_path: Path, capsys) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    out = tmp_path / "cal.json"
    assert probe_main(["give-way", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "needs one CUDA GPU" in err and "torch.cuda.is_available() is False" in err
    assert not out.exists()


def test_bad_arguments_are_refused_before_the_gpu_is_asked(tmp_path: Path, capsys) -> None:
    assert probe_main(["give-way", "--model", "llama_nope"]) == 2
    assert "--model llama_nope" in capsys.readouterr().err
    assert probe_main(["give-way", "--trials", "0"]) == 2
    assert "--trials must be at least 1" in capsys.readouterr().err
    assert probe_main(["give-way", "--hardware", "tpu"]) == 2
    assert "--hardware tpu is not a profile" in capsys.readouterr().err
    assert probe_main(["give-way", "-o", str(tmp_path / "no" / "cal.json")]) == 2
    assert "existing directory" in capsys.readouterr().err
    assert probe_main(["nothing"]) == 2
    assert "give-way" in capsys.readouterr().err


def test_the_probe_runs_the_models_own_backward_gemm_shapes() -> None:
    from harness.plan.calibrate.give_way_probe import gemm_shapes

    shapes = gemm_shapes("llama2_34b", 2048, 1)
    # dgrad and wgrad of every linear: 8 distinct shapes, the MLP's 22016 among them
    assert len(shapes) == 8 and len(set(shapes)) == 8
    assert (2048, 22016, 8192) in shapes and (8192, 22016, 2048) in shapes


def test_it_adds_its_section_to_a_bandwidth_calibration(tmp_path: Path) -> None:
    """One file carries both: the measured collectives stay, the give_way section joins."""
    path = tmp_path / "calibration.json"
    bandwidth = {"schema": "yafsdp-bench.calibration/1", "world_size": 8, "nodes": 1,
                 "backend": "nccl", "measured_at": "earlier",
                 "all_gather": [{"bytes": 2**20, "seconds": 1e-4}]}  # fmt: skip
    path.write_text(json.dumps(bandwidth))
    doc = calibration_document([_session("chain", 0, [400.0])], device="GPU", sm_count=132,
                               torch_version="2.13.0", notes="")  # fmt: skip
    write_calibration(path, doc)
    measured = calibration_from(path)
    assert measured.measured == ("collectives", "give_way")
    assert measured.collectives[0].world_size == 8
    assert measured.give_way is not None and measured.give_way.equal_priority_wait == 0.5
    assert json.loads(path.read_text())["measured_at"] == "earlier"


def test_the_collective_stand_in_says_why_it_cannot_run(monkeypatch) -> None:
    """Without Triton the probe still measures the cast and divide; the stand-in's reason
    goes into the notes (suite D then fails its row for the constants left unmeasured)."""
    import builtins

    from harness.plan.calibrate.give_way_probe import triton_missing

    real_import = builtins.__import__

    def no_triton(name, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if name == "triton":
            raise ImportError("No module named 'triton'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_triton)
    assert "triton is not importable" in (triton_missing() or "")
