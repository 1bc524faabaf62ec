"""CPU MFU from one peak per sweep (the median of its jobs' start-up measurements), with
the spread shown, not from a peak each job measured for itself."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.report.run_conditions import cpu_mfu, cpu_peaks
from harness.report.tables import throughput_table


def _job(engine: str, peak: float, tflops: float, host: str = "node1") -> dict:
    return {"status": "ok", "model": "llama_tiny", "gpus": 2, "seq_len": 128, "ckpt_layers": 0,
            "micro_batch": 1, "grad_accum": 1, "dtype": "fp32", "seed": 0,
            "model_impl": "native", "engine": engine, "host": host, "threads_per_rank": 1,
            "tokens_per_s_per_device": 100.0, "tflops_per_device": tflops,
            "peak_flops_per_device": peak, "mfu": tflops * 1e12 / peak,
            "peak_flops_source": "measured fp32 matmul on CPU (best of fp32)"}  # fmt: skip


def test_every_cpu_jobs_mfu_uses_the_median_peak() -> None:
    df = pd.DataFrame([_job("yafsdp", 1e11, 0.02), _job("fsdp1", 3.9e11, 0.02),
                       _job("fsdp2", 2e11, 0.02)])  # fmt: skip
    ((machine, peak),) = cpu_peaks(df).items()
    assert machine == ("node1", 1) and peak.median == 2e11 and peak.jobs == 3
    assert "spread 0.1–0.39, ×3.9" in peak.describe()
    mfus = {r["engine"]: cpu_mfu(r, cpu_peaks(df)) for _, r in df.iterrows()}
    assert mfus == pytest.approx({"yafsdp": 0.1, "fsdp1": 0.1, "fsdp2": 0.1})  # same work
    _, rows = throughput_table(df)
    assert {row[-2] for row in rows} == {"10.00%"}  # not 20%, 5.1% and 10%


def test_a_gpu_job_keeps_its_datasheet_mfu() -> None:
    gpu = _job("yafsdp", 312e12, 100.0) | {"peak_flops_source": "datasheet A100 bf16"}
    df = pd.DataFrame([gpu])
    assert cpu_peaks(df) == {}
    _, rows = throughput_table(df)
    assert rows[0][-2] == f"{100 / 312 * 100:.2f}%"
