"""The attribution against HolisticTraceAnalysis on its own public traces.

Where HTA computes the same quantity, we agree within 2 percentage points:
- per stream (`get_idle_time_breakdown`): the share of idle time that is host wait and
  kernel wait, and idle time as a share of the stream's span (its busy time's complement);
- per rank (`get_temporal_breakdown`): idle, compute and non-compute time as shares of the
  span from the first kernel to the last, against the attribution's causes summed over
  the steps (idle = host wait + queued + unattributed; compute = model compute + engine +
  optimizer kernels; non-compute = exposed communication + exposed copies).
HTA keeps every step here (include_last_profiler_step=True), as we do. The largest gap is
event_sync's device idle (about 1.9 points): HTA's temporal breakdown counts the trace's
`cuda_sync` records on the GPU lane as busy time, which they are not (its own idle
breakdown leaves them out). The comparison table is printed (run with -s to see it when the
test passes).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness.trace import load_trace
from harness.trace.diagnose import causes as C
from harness.trace.diagnose.attribute import attribute_loaded
from harness.trace.diagnose.stream_idle import stream_idle

hta = pytest.importorskip("hta.trace_analysis")

DATA = Path(__file__).resolve().parents[1] / "data"
SETS = {
    "nccl_data": [DATA / "gpu_traces/nccl_data.json.gz"],
    "sampled": [DATA / f"hta_traces/sampled/rank{r}.json.gz" for r in (0, 1)],
    "event_sync": [DATA / "hta_traces/event_sync/rank0.json.gz"],
    "rocm": [DATA / "gpu_traces/mi250_minitoy_train_ROCm6_2_kineto.json.gz"],
}  # fmt: skip
TOLERANCE_PP = 2.0


def _hta(files: list[Path], tmp: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    for f in files:
        shutil.copy(f, tmp / f.name)
    analysis = hta.TraceAnalysis(trace_dir=str(tmp), include_last_profiler_step=True)
    ranks = sorted(analysis.t.traces)
    idle, _ = analysis.get_idle_time_breakdown(ranks=ranks, visualize=False)
    return idle, analysis.get_temporal_breakdown(visualize=False)


def _stream_rows(name: str, rank: int, ours: pd.DataFrame, theirs: pd.DataFrame) -> list:
    rows = []
    for r in ours.itertuples():
        mine = theirs[(theirs["rank"] == rank) & (theirs["stream"] == r.stream)]
        by_cat = dict(zip(mine["idle_category"], mine["idle_time"], strict=True))
        idle_us = sum(by_cat.values())
        host, kernel = by_cat.get("host_wait", 0), by_cat.get("kernel_wait", 0)
        for quantity, our_pct, their_pct in [
            ("host wait % of idle", 100 * r.host_wait_s / r.idle_s, 100 * host / idle_us),
            ("kernel wait % of idle", 100 * r.kernel_wait_s / r.idle_s, 100 * kernel / idle_us),
            ("idle % of span", 100 * r.idle_s / r.span_s, 100 * idle_us * 1e-6 / r.span_s),
        ]:
            rows.append((name, rank, f"stream {r.stream}", quantity, our_pct, their_pct))
    return rows


def _rank_rows(name: str, rank: int, path: Path, temporal: pd.DataFrame) -> list:
    steps = attribute_loaded(load_trace(path))
    span = sum(s.step_s for s in steps)

    def pct(causes: tuple[str, ...]) -> float:
        return 100 * sum(s.causes[c] for s in steps for c in causes) / span

    idle = pct((*C.IDLE, C.UNATTRIBUTED))
    compute = pct((*C.COMPUTE, C.ENGINE, C.OPTIMIZER))
    theirs = temporal[temporal["rank"] == rank].iloc[0]
    return [
        (name, rank, "device", "idle %", idle, theirs["idle_time_pctg"]),
        (name, rank, "device", "compute %", compute, theirs["compute_time_pctg"]),
        (name, rank, "device", "non-compute %", 100 - idle - compute,
         theirs["non_compute_time_pctg"]),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def comparison(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    rows = []
    for name, files in SETS.items():
        idle, temporal = _hta(files, tmp_path_factory.mktemp(name))
        for rank, path in enumerate(files):
            rows += _stream_rows(name, rank, stream_idle(load_trace(path)), idle)
            rows += _rank_rows(name, rank, path, temporal)
    table = pd.DataFrame(rows, columns=["trace", "rank", "lane", "quantity", "ours", "HTA"])
    table["diff_pp"] = table["ours"] - table["HTA"]
    return table


def test_agreement_with_hta_within_two_points(comparison, capsys):
    with capsys.disabled():
        print("\n" + comparison.to_markdown(index=False, floatfmt=".2f"))
    assert len(comparison) >= 40
    worst = comparison.loc[comparison["diff_pp"].abs().idxmax()]
    assert abs(worst["diff_pp"]) <= TOLERANCE_PP, worst.to_dict()


def test_every_stream_and_rank_is_compared(comparison):
    assert set(comparison["trace"]) == set(SETS)
    sampled = comparison[comparison["trace"] == "sampled"]
    assert set(sampled["rank"]) == {0, 1}
    assert sampled["lane"].nunique() == 6  # five streams and the device
