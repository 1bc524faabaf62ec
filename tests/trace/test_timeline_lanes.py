"""Timeline lanes read in words: the step's phases are marked, threads are named by role,
yafsdp's panel comes first and a sweep's pictures follow the tables' order."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.jobdir.grid_point import GridPoint
from harness.results import timelines
from harness.trace.phases import step_phases, thread_titles


def _events(rows: list[tuple[str, float, float, int]]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=["name", "ts", "dur", "tid"])
    df["pid"] = "1"
    df["cat"] = "cpu_op"
    df["stream"] = -1
    for c in ("name", "pid", "tid", "cat"):
        df[c] = df[c].astype(str).astype("category")
    return df


def test_forward_backward_and_optimizer_are_marked() -> None:
    events = _events([
        ("ProfilerStep#1", 0, 100, 7),
        ("aten::mm", 5, 10, 7),
        ("autograd::engine::evaluate_function: MmBackward0", 40, 5, 7),
        ("autograd::engine::evaluate_function: AddBackward0", 70, 5, 7),
        ("Optimizer.step#AdamW.step", 80, 15, 7),
    ])  # fmt: skip
    phases = step_phases(events, 0, 100)
    spans = {k: (float(v.start[0]), float(v.end[-1])) for k, v in phases.items()}
    assert spans == {"forward": (0, 40), "backward": (40, 75), "optimizer": (80, 95)}


def test_threads_are_named_by_role_not_os_id() -> None:
    events = _events([("ProfilerStep#1", 0, 100, 7), ("gloo:all_gather", 5, 10, 9),
                      ("gloo:all_gather", 5, 10, 11)])  # fmt: skip
    names = {("1", "9"): "thread 9 (pt_gloo_runloop)", ("1", "11"): "thread 11 (python)"}
    assert thread_titles(events, names) == {
        "7": "training thread", "9": "gloo thread 1", "11": "thread 1"
    }  # fmt: skip


def test_sweep_pictures_put_yafsdp_first_and_points_in_table_order(monkeypatch, tmp_path) -> None:
    drawn: list[tuple[str, list[str]]] = []

    def plot(job_dirs: list[Path], out: Path) -> Path:
        drawn.append((out.name, [d.name for d in job_dirs]))
        return out

    monkeypatch.setattr("harness.trace.timeline.plot_timeline", plot)
    rows = [
        {"model": m, "gpus": 2, "seq_len": s, "ckpt_layers": 0, "micro_batch": 1,
         "grad_accum": 1, "dtype": "fp32", "seed": 0, "model_impl": "native", "engine": e,
         "status": "ok", "profile_traces": "[]", "job_dir": f"{m}-{s}-{e}"}
        for m in ("llama_mini", "llama_tiny") for s in (1024, 256) for e in ("fsdp1", "yafsdp")
    ]  # fmt: skip
    timelines.draw_sweep_timelines(tmp_path, pd.DataFrame(rows))
    order = [GridPoint.of(r) for r in rows[::2]]
    assert [name for name, _ in drawn] == [
        timelines.timeline_names(order)[p] for p in sorted(order, key=timelines.table_order)
    ]
    assert drawn[0][0].startswith("llama_tiny") and "_s256_" in drawn[0][0]  # smallest first
    assert all(jobs[0].endswith("yafsdp") for _, jobs in drawn)
