"""results.csv takes trace summaries from the trace files, not from result.json: computed
offline, cached beside each trace (keyed by size, mtime and analysis version), in a
process pool across jobs; a trace that cannot be analysed is that job's profile_error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sweep_fixtures import write_job

from harness.jobdir.paths import RESULT_FILE
from harness.jobdir.result import Profile, read_result, write_result
from harness.results.table import collect_results
from harness.trace import cache
from tests.trace.synthetic import Kernel, nccl, write_gpu_trace

# overlap 50%: NCCL 50..150 against compute 0..100 and 200..250, in each of two steps
STEP = [Kernel(1, 7, 0, 100), nccl(1, 20, 50, 100), Kernel(1, 7, 200, 50)]
KERNELS = [k._replace(step=s, start=k.start + (s - 1) * 1000) for s in (1, 2) for k in STEP]


def _traced_job(sweep: Path, job: str, ranks: int = 2) -> Path:
    """A job whose result.json lists its traces but holds no summary (today's jobs)."""
    write_job(sweep, job, gpus=ranks)
    job_dir = sweep / job
    result = read_result(job_dir / RESULT_FILE)
    result.profile = Profile(traces=[f"traces/rank{r}.json.gz" for r in range(ranks)])
    write_result(job_dir, result)
    for r in range(ranks):
        write_gpu_trace(job_dir / f"traces/rank{r}.json.gz", KERNELS, rank=r, world_size=ranks)
    return job_dir


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    calls: list[Path] = []
    real = cache.summarize_trace

    def counting(path: Path) -> dict:
        calls.append(Path(path))
        return real(path)

    monkeypatch.setattr(cache, "summarize_trace", counting)
    return calls


def test_summary_comes_from_the_traces_and_is_cached(tmp_path: Path, counted) -> None:
    sweep = tmp_path / "sweep"
    job = _traced_job(sweep, "a")
    row = collect_results(sweep, workers=1).iloc[0]
    assert row["profile_overlap_pct"] == pytest.approx(50.0)
    assert row["profile_comm_s_per_step"] == pytest.approx(100e-6)
    assert len(counted) == 2 and (job / "trace_cache/rank0.json.gz.summary.json").is_file()
    assert sorted(p.name for p in (job / "traces").iterdir()) == ["rank0.json.gz", "rank1.json.gz"]

    again = collect_results(sweep, workers=1).iloc[0]
    assert len(counted) == 2  # both ranks from the cache
    assert again["profile_overlap_pct"] == row["profile_overlap_pct"]

    trace = job / "traces/rank1.json.gz"
    st = trace.stat()
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a rewritten trace
    collect_results(sweep, workers=1)
    assert counted[2:] == [trace]


def test_analysis_version_change_recomputes(tmp_path: Path, counted, monkeypatch) -> None:
    sweep = tmp_path / "sweep"
    _traced_job(sweep, "a")
    collect_results(sweep, workers=1)
    monkeypatch.setattr(cache, "ANALYSIS_VERSION", cache.ANALYSIS_VERSION + 1)
    collect_results(sweep, workers=1)
    assert len(counted) == 4


def test_old_summary_in_result_json_is_replaced_by_the_traces(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    job = _traced_job(sweep, "a")
    result = read_result(job / RESULT_FILE)
    result.profile.summary = {"overlap_pct": 3.0}  # from an older, wrong analysis
    write_result(job, result)
    assert collect_results(sweep, workers=1).iloc[0]["profile_overlap_pct"] == pytest.approx(50)


def test_unreadable_trace_is_that_jobs_profile_error(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    _traced_job(sweep, "good")
    bad = _traced_job(sweep, "bad")
    (bad / "traces/rank1.json.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    df = collect_results(sweep, workers=1).set_index("job_dir")
    assert df.loc["good", "profile_overlap_pct"] == pytest.approx(50.0)
    assert str(bad / "traces/rank1.json.gz") in df.loc["bad", "profile_error"]
    assert df.loc["bad", "status"] == "ok"  # the timings stand


def test_process_pool_gives_the_same_table(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    for job in ("a", "b", "c"):
        _traced_job(sweep, job)
    pooled = collect_results(sweep, workers=2)
    for trace in sweep.rglob("*.summary.json"):
        trace.unlink()
    inline = collect_results(sweep, workers=1)
    cols = [c for c in inline.columns if c.startswith("profile_")]
    assert pooled[cols].equals(inline[cols])
    assert len(list(sweep.rglob("trace_cache/*.summary.json"))) == 6


def test_hta_opens_a_summarised_jobs_traces_folder(tmp_path: Path) -> None:
    """Summaries are cached outside traces/, so HolisticTraceAnalysis, which reads every file
    of the folder it is given as a trace, opens a job's traces/ after the report read it."""
    hta = pytest.importorskip("hta.trace_analysis")
    sweep = tmp_path / "sweep"
    job = _traced_job(sweep, "a")
    collect_results(sweep, workers=1)  # writes the summaries' cache
    analysis = hta.TraceAnalysis(trace_dir=str(job / "traces"))
    assert sorted(analysis.t.traces) == [0, 1]


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_trace_summaries_follow_the_umask_as_results_do(tmp_path: Path, umask: int) -> None:
    trace = write_gpu_trace(tmp_path / "job" / "traces" / "rank0.json.gz", KERNELS)
    old = os.umask(umask)
    try:
        cache.cached_trace_summary(trace)
        write_result(tmp_path / "job", read_result(_traced_job(tmp_path, "other") / RESULT_FILE))
    finally:
        os.umask(old)
    summary = cache.cache_path(trace)
    mode = summary.stat().st_mode & 0o777
    assert mode == 0o666 & ~umask, oct(mode)
    assert mode == (tmp_path / "job" / RESULT_FILE).stat().st_mode & 0o777
