"""`python -m harness.trace merge <job>`: one Perfetto-ready file, every rank its own
process, every lane of a rank's trace its own named thread, flow ids unique."""

from __future__ import annotations

import gzip
import json
from collections import Counter

from harness.trace.__main__ import main
from tests.trace.synthetic import Kernel, nccl, write_gpu_trace


def test_every_rank_is_its_own_process(tmp_path, capsys):
    job = tmp_path / "job"
    per_rank = {}
    for rank in (0, 1):
        ks = [Kernel(1, 7, 1e4, 1000.0), nccl(1, 20, 1e4 + 1000.0, 500.0)]
        path = write_gpu_trace(job / f"traces/rank{rank}.json.gz", ks, rank=rank, world_size=2)
        with gzip.open(path or job / f"traces/rank{rank}.json.gz", "rt") as f:
            per_rank[rank] = json.load(f)["traceEvents"]
    assert main(["merge", str(job)]) == 0
    said = capsys.readouterr().out
    out = job / "traces/merged.json.gz"
    assert said.startswith(f"wrote {out} (2 ranks, ") and "ui.perfetto.dev" in said
    with gzip.open(out, "rt") as f:
        events = json.load(f)["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1"}
    kept = Counter(e["pid"] for e in events if e.get("ph") != "M")
    assert kept == {r: sum(e.get("ph") != "M" for e in per_rank[r]) for r in (0, 1)}
    threads = [(e["pid"], e["tid"]) for e in events if e.get("name") == "thread_name"]
    assert len(threads) == len(set(threads)) and {p for p, _ in threads} == {0, 1}
    lanes = {(e["pid"], e["tid"]) for e in events if e.get("ph") == "X"}
    assert lanes <= set(threads)  # every lane is named
    flows = Counter((e["ph"], e["id"]) for e in events if e.get("ph") in ("s", "f"))
    assert all(n == 1 for n in flows.values())
