"""`why`: two synthetic job directories (result.json + traces) compared cause by cause."""

import json
from pathlib import Path

import pytest

from harness.jobdir.result import make_result, write_result
from harness.trace.__main__ import main
from harness.trace.diagnose import causes
from harness.trace.diagnose.attribute import StepAttribution
from harness.trace.diagnose.ranks import SKEW
from harness.trace.diagnose.why import WhyError, why_lines
from harness.trace.jobs import why
from tests.trace.synthetic import Kernel, nccl, write_gpu_trace

GEMM, AG = causes.COMPUTE_GEMM_ATTENTION, causes.COMM_ALL_GATHER


def _job(root: Path, name: str, label: str, timed_s: float, late_us: float = 0.0, **point) -> Path:
    """A 2-rank job whose rank 1 reaches each step's all-gather `late_us` after rank 0."""
    job = root / name
    config = {"model": "llama_tiny", "gpus": 2, "seq_len": 128, "ckpt_layers": 0,
              "micro_batch": 1, "grad_accum": 1, "dtype": "bf16", "seed": 0,
              "engine": {"name": label, "label": label}, **point}  # fmt: skip
    write_result(job, make_result(status="ok", config=config,
                                  metrics={"iteration_time_s": timed_s}))  # fmt: skip
    for rank in (0, 1):
        compute = 1000.0 + (late_us if rank == 1 else 0.0)
        ks = [
            k
            for s in (1, 2)
            for k in (
                Kernel(s, 7, s * 1e4, compute),
                nccl(s, 20, s * 1e4 + compute, 1000.0 + late_us + 200.0 - compute),
                Kernel(s, 7, s * 1e4 + 1200.0 + late_us, 300.0),
            )
        ]
        write_gpu_trace(job / f"traces/rank{rank}.json", ks, rank=rank, world_size=2)
    return job


def _stub(steps: dict[Path, dict[int, tuple[float, dict[str, float], dict]]]):
    """An attribution read from a table: job -> rank -> (step_s, causes, by_unit)."""

    def attribute(job_dir):
        return [
            StepAttribution(rank=r, step=s, start_us=0.0, step_s=step_s, causes=c, by_unit=u)
            for r, (step_s, c, u) in steps[Path(job_dir)].items()
            for s in (1, 2)
        ]

    return attribute


@pytest.fixture
def pair(tmp_path):
    fast = _job(tmp_path, "fast", "yafsdp", timed_s=0.0020)
    slow = _job(tmp_path, "slow", "fsdp1", timed_s=0.0026, late_us=500.0)
    table = {
        fast: {
            0: (2.0e-3, {GEMM: 1.3e-3, AG: 0.2e-3, causes.HOST_OTHER: 0.5e-3}, {AG: {"1": 2e-4}}),
            1: (1.9e-3, {GEMM: 1.3e-3, AG: 0.2e-3, causes.HOST_OTHER: 0.4e-3}, {}),
        },
        slow: {
            0: (2.6e-3, {GEMM: 1.3e-3, AG: 0.7e-3, causes.HOST_OTHER: 0.6e-3}, {AG: {"1": 7e-4}}),
            1: (2.5e-3, {GEMM: 1.8e-3, AG: 0.2e-3, causes.HOST_OTHER: 0.5e-3}, {}),
        },
    }
    return fast, slow, _stub(table)


def test_terms_sum_to_the_difference_and_skew_is_named(pair):
    fast, slow, attribute = pair
    found = why(fast, slow, attribute)
    assert found["warnings"] == []
    assert found["difference_s"] == pytest.approx(0.6e-3)
    assert sum(t["delta_s"] for t in found["terms"]) == pytest.approx(0.6e-3)
    terms = {t["cause"]: t["delta_s"] for t in found["terms"]}
    # rank 0 (the slowest) waited 500 us for rank 1 in the slow job: skew, not transfer
    assert terms[SKEW] == pytest.approx(0.5e-3)
    assert terms[AG] == pytest.approx(0.0, abs=1e-12)
    assert terms[causes.HOST_OTHER] == pytest.approx(0.1e-3)
    assert found["b"]["slowest_ranks"] == {"0": 2}
    text = "\n".join(why_lines(found))
    assert text.startswith("fsdp1 +0.0006 s against yafsdp (traced, slowest rank's step; timed")
    assert "+0.0005 s exposed wait for a rank that arrived late" in text
    assert "[rank 1 +0.0005 s]" in text
    assert "skew: rank 1 arrived late, because compute.gemm_attention" in text


def test_swapping_a_and_b_negates_every_term(pair):
    fast, slow, attribute = pair
    ab, ba = why(fast, slow, attribute), why(slow, fast, attribute)
    assert ba["difference_s"] == pytest.approx(-ab["difference_s"])
    assert {t["cause"]: -t["delta_s"] for t in ab["terms"]} == pytest.approx(
        {t["cause"]: t["delta_s"] for t in ba["terms"]}
    )


def test_a_trace_far_from_the_timing_is_said_first(tmp_path, pair):
    fast, slow, attribute = pair
    config = json.loads((slow / "result.json").read_text())["config"]
    write_result(slow, make_result(status="ok", config=config,
                                   metrics={"iteration_time_s": 0.0040}))  # fmt: skip
    lines = why_lines(why(fast, slow, attribute))
    assert lines[0].startswith("warning: fsdp1: the traced step (0.0026 s) differs from the timed")
    assert "more than 25%" in lines[0]


def test_a_traced_difference_of_another_sign_is_said_first(pair):
    fast, slow, attribute = pair
    config = json.loads((slow / "result.json").read_text())["config"]
    write_result(slow, make_result(status="ok", config=config,
                                   metrics={"iteration_time_s": 0.0019}))  # fmt: skip
    found = why(fast, slow, attribute)
    assert any("another sign than the timed one" in w for w in found["warnings"])
    assert why_lines(found)[0].startswith("warning: ")


def test_jobs_at_different_points_are_refused(tmp_path, pair):
    fast, _, attribute = pair
    other = _job(tmp_path, "other", "fsdp1", timed_s=0.002, seq_len=256)
    with pytest.raises(WhyError, match=r"different grid points \(seq_len: 128 vs 256\)"):
        why(fast, other, attribute)


def test_cli_prints_json_and_refuses_other_points(tmp_path, pair, capsys, monkeypatch):
    fast, slow, attribute = pair
    from harness.trace.diagnose.traced import traced_record
    from harness.trace.jobs import analyse_job

    def stubbed(job):  # the job's traced record, its steps attributed by the stub
        return traced_record(analyse_job(job), attributed=attribute(job))

    monkeypatch.setattr("harness.trace.jobs.job_traced", stubbed)
    assert main(["why", str(fast), str(slow), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["difference_s"] == pytest.approx(0.6e-3)
    other = _job(tmp_path, "other", "fsdp1", timed_s=0.002, gpus=4)
    assert main(["why", str(fast), str(other)]) == 2
    assert "different grid points (gpus: 2 vs 4)" in capsys.readouterr().err


def test_the_attribution_of_the_traces_themselves(tmp_path):
    """No stub: the jobs' own traces attributed; rank 0 of the slow job waits 500 us a step
    for rank 1, which is still in its GEMM."""
    fast = _job(tmp_path, "fast", "yafsdp", timed_s=0.0057)
    slow = _job(tmp_path, "slow", "fsdp1", timed_s=0.0060, late_us=500.0)
    found = why(fast, slow)
    assert found["warnings"] == []
    terms = {t["cause"]: t for t in found["terms"]}
    assert terms[SKEW]["delta_s"] == pytest.approx(500e-6)
    assert terms[SKEW]["units"] == {"rank 1": pytest.approx(500e-6)}
    assert sum(t["delta_s"] for t in found["terms"]) == pytest.approx(found["difference_s"])
    assert found["b"]["late_arrivals"][0].startswith(
        "skew: rank 1 arrived late, because compute.gemm_attention (2 collectives, 0.500 ms"
    )


def test_one_rank_read_in_both_jobs(pair):
    fast, slow, attribute = pair
    found = why(fast, slow, attribute, rank=1)
    assert found["difference_s"] == pytest.approx(0.6e-3)  # 2.5 - 1.9 ms on rank 1
    terms = {t["cause"]: t["delta_s"] for t in found["terms"]}
    assert terms[GEMM] == pytest.approx(0.5e-3) and SKEW not in terms  # rank 1 waited for none
    assert why_lines(found)[0].startswith("fsdp1 +0.0006 s against yafsdp (traced, rank 1's step")
    with pytest.raises(WhyError, match="no step of rank 5"):
        why(fast, slow, attribute, rank=5)


def test_units_named_differently_are_listed_per_job_not_subtracted():
    def job(label):
        return {"label": label, "step_s": 1.0, "slowest_ranks": {"0": 1}, "late_arrivals": []}

    term = {"cause": AG, "description": "exposed all-gather", "delta_s": 0.1, "a_s": 0.2,
            "b_s": 0.3, "units": {"1": -0.2, "": 0.3}, "units_a": {"1": 0.2},
            "units_b": {"": 0.3}}  # fmt: skip
    found = {"warnings": [], "a": job("yafsdp"), "b": job("fsdp1"), "difference_s": 0.1,
             "timed_difference_s": 0.1, "terms": [term]}  # fmt: skip
    line = why_lines(found)[1]
    assert "[fsdp1 has (no unit) 0.3000 s; yafsdp has 1 0.2000 s]" in line
    assert "-0.2000" not in line


def test_one_line_per_cause_under_a_header(pair):
    fast, slow, attribute = pair
    lines = why_lines(why(fast, slow, attribute))
    assert lines[0].endswith("cause by cause:")
    causes_shown = [line for line in lines[1:] if line.startswith("  +") or line.startswith("  -")]
    assert len(causes_shown) >= 2  # skew and host.other, each on its own line
    assert all(line.count(" s ") < 6 for line in causes_shown)
    assert max(len(line) for line in lines) < 200


def test_the_cli_survives_a_closed_pipe(pair, monkeypatch):
    """`python -m harness.trace why a b | head -1`: no BrokenPipeError traceback."""
    import subprocess
    import sys

    fast, slow, _ = pair
    head = subprocess.run(
        f"{sys.executable} -m harness.trace why {fast} {slow} | head -1",
        shell=True, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert head.stdout.strip()
    assert "Traceback" not in head.stderr and "BrokenPipe" not in head.stderr


def test_timeline_says_where_it_wrote(tmp_path, capsys, monkeypatch):
    def plot(dirs, out, *, rank, step):
        Path(out).write_bytes(b"png")
        return Path(out)

    monkeypatch.setattr("harness.trace.__main__.plot_timeline", plot)
    monkeypatch.chdir(tmp_path)
    assert main(["timeline", str(tmp_path), "-o", "x.png"]) == 0
    said = capsys.readouterr().out
    assert said.startswith("wrote the timeline of rank 0, the first profiled step, 1 job(s): ")
    assert said.split()[-1] == str(tmp_path / "x.png")
