"""Suite S's arithmetic and calibration file on CPU, with the GPU probe replaced by
hand-built measurements (`serial_probe`'s functions need CUDA)."""

from __future__ import annotations

import json

import pytest
import torch

from harness.gpucheck import suite_s
from harness.gpucheck.suite_s import probe as serial_probe
from harness.plan.calibrate.calibration import calibration_from

UNSHARD, COMPUTE = 13, 7


def _trace(cat_stream: int) -> dict:
    kernels = [
        {"name": "spin_kernel(long)", "cat": "kernel", "dur": 1.0, "stream": UNSHARD},
        {"name": "CatArrayBatchedCopy<...>", "cat": "kernel", "dur": 100.0, "stream": cat_stream},
        {"name": "CatArrayBatchedCopy<...>", "cat": "kernel", "dur": 50.0, "stream": cat_stream},
        {"name": "CatArrayBatchedCopy<rope>", "cat": "kernel", "dur": 2.0, "stream": COMPUTE},
        {"name": "ampere_gemm", "cat": "kernel", "dur": 900.0, "stream": COMPUTE},
    ]
    hooks = [
        {"name": "FullyShardedDataParallel._pre_forward", "cat": "user_annotation", "dur": 60.0},
        {"name": "FullyShardedDataParallel.rate_limiter", "cat": "user_annotation", "dur": 20.0},
        {"name": "FullyShardedDataParallel._post_backward_hook", "cat": "user_annotation",
         "dur": 40.0},
    ]  # fmt: skip
    return {"events": [{**e, "ts": 0.0, "stream": e.get("stream")} for e in kernels + hooks],
            "flat_param_numels": [1000, 500], "units": 2}  # fmt: skip


def test_the_cats_on_the_unshard_stream_pass_and_give_bytes_per_us() -> None:
    figures = suite_s.cat_figures(_trace(UNSHARD))
    assert figures["cat_streams"] == [UNSHARD]
    assert figures["cat_bytes_per_us"] == pytest.approx(4 * 1000 / 100)  # 2 B x (read + write)
    assert figures["hook_us"] == pytest.approx((60 + 40 - 20) / 2)  # the limiter's wait out
    assert suite_s.cat_verdict(figures).ok


def test_cats_on_the_compute_stream_fail_the_row() -> None:
    verdict = suite_s.cat_verdict(suite_s.cat_figures(_trace(COMPUTE)))
    assert not verdict.ok and "unshard is 13" in verdict.detail


def test_the_race_loss_probability_from_the_mean_wait() -> None:
    """Three links, 1 ms GEMMs: waits of mean 1.0 GEMM = 1/2 + 2p, so p = 1/4."""
    latencies = [1.0 + w for w in (0.5, 1.5) * 100]  # chain alone 1 ms, waits 0.5 and 1.5
    figures = suite_s.chain_figures(latencies, alone_ms=1.0, gemm_ms=1.0, links=3)
    assert figures["trials"] == 200
    assert figures["race_loss_probability"] == pytest.approx(0.25)


def test_bandwidth_as_a_fraction_of_the_datasheet_peak() -> None:
    figures = suite_s.bandwidth_figures({"cast_gbps": 2400.0}, "NVIDIA H200")
    assert figures["cast_efficiency"] == pytest.approx(0.5)
    assert "cast_efficiency" not in suite_s.bandwidth_figures({"cast_gbps": 1.0}, "Some GPU")


def _fake_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serial_probe, "gemm_ms", lambda device: 2.0)
    monkeypatch.setattr(serial_probe, "fsdp1_trace", lambda device: _trace(UNSHARD))
    waits = lambda device, trials, links: ([3.0, 5.0] * (trials // 2), 1.0)  # noqa: E731
    monkeypatch.setattr(serial_probe, "chain_latencies", waits)
    monkeypatch.setattr(
        serial_probe,
        "v1_copy",
        lambda device: {
            "copy_ms_beside_gemms": 1.5,
            "copy_ms_alone": 1.0,
            "priority0_ms_after_copy": 1.0,
        },
    )
    monkeypatch.setattr(serial_probe, "bandwidth", lambda device: {"cast_gbps": 3000.0})
    monkeypatch.setattr(serial_probe, "allocator_retries",
                        lambda device: {"num_alloc_retries": 3, "oom": False})  # fmt: skip


def test_every_row_lands_in_the_calibration_the_planner_reads(tmp_path, monkeypatch) -> None:
    """Suite D's file is kept and added to; the planner reads the race-loss probability:
    waits of 2 and 4 ms beside 2 ms GEMMs, a mean of 1.5 GEMMs, p = (1.5 - 0.5) / 2."""
    _fake_probe(monkeypatch)
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / suite_s.FILE).write_text(
        json.dumps(
            {"schema": suite_s.SCHEMA, "give_way": {"equal_priority_wait": 0.9, "device": "H200"}}
        )
    )
    rows = suite_s.run(tmp_path / "dev", "NVIDIA H200")
    assert [r.result for r in rows] == ["pass"] * 5
    for folder in ("dev", "out"):
        data = json.loads((tmp_path / folder / suite_s.FILE).read_text())
        assert set(data["one_gpu"]) >= {"fsdp1_cat_stream", "chain_wait", "v1_copy_at_-1",
                                        "bandwidth", "allocator_retries"}  # fmt: skip
    constants = calibration_from(tmp_path / "dev" / suite_s.FILE).give_way
    assert constants is not None
    assert constants.race_loss_probability == pytest.approx(0.5)
    assert constants.equal_priority_wait == pytest.approx(0.9)  # suite D's, kept
    assert rows[2].figures["copy_stretch"] == pytest.approx(1.5)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU fallback")
def test_the_runner_knows_suite_s_and_skips_it_without_cuda(tmp_path, monkeypatch, capsys) -> None:
    from harness.gpucheck import cli

    monkeypatch.delenv("OUT", raising=False)
    assert "S" in cli.SUITES and cli.order(None).index("S") < cli.order(None).index("C")
    assert cli.main(["--suite", "S", "--reports-dir", str(tmp_path)]) == 0
    assert "GPU min" in capsys.readouterr().out  # its estimate, from suite_s.WORK
    rows = json.loads((tmp_path / "cpu" / "gpu-check.json").read_text())["rows"]
    assert [(r["suite"], r["result"]) for r in rows] == [("S", "skip")] * len(suite_s.NAMES)
