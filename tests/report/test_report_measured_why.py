"""Why (measured) under the speedup tables, in the cause names the planner's terms map to."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from harness.config import JobConfig
from harness.engines.registry import ENGINES
from harness.plan.explain import _PART_WORDS
from harness.plan.planner import network, time_case
from harness.plan.time.mechanisms import MECHANISMS, applicable
from harness.plan.time.simulate import COMM, COMPUTE, SIDE, Op
from harness.plan.time.timing import _label, build_program
from harness.report.measured import PLANNER_CAUSES, cause_rows
from harness.report.render import build_report
from harness.trace.diagnose import causes
from harness.trace.diagnose.ranks import SKEW
from tests.plan.planned import priced_config
from tests.report.sweep_fixtures import write_job
from tests.trace.synthetic import Kernel, nccl, write_gpu_trace

KNOWN_CAUSES = {*causes.ORDER, SKEW}


def _planner_terms() -> set[str]:
    """Every term a prediction's breakdown can hold, from the planner's own programs, and
    every mechanism it prices."""
    terms = {"overlap slowdown", *MECHANISMS, *_PART_WORDS}
    priced = priced_config(JobConfig(model="llama_tiny", seq_len=32, gpus=4))
    for label in ENGINES:
        cfg = replace(priced, engine=ENGINES[label].config())
        net = network(cfg)
        assert net is not None
        on = frozenset(applicable(label))
        for op in build_program(time_case(cfg), cfg.device_spec, net, on):
            if op.stream == COMPUTE and op.seconds > 0:  # zero-time markers add no part
                terms.add(op.term)
            terms.add(_label(op))
    for stream in (COMM, SIDE, COMPUTE):  # the label of an op of no kind on each stream
        terms.add(_label(Op(name="x", stream=stream, seconds=0.0, term="")))
    return terms


def test_every_planner_term_maps_to_known_causes():
    terms = _planner_terms()
    assert {"compute", "optimizer", "exposed all_gather", "yafsdp_buffers"} <= terms
    missing = sorted(t for t in terms if t not in PLANNER_CAUSES)
    assert missing == [], f"planner terms with no measured cause: {missing}"
    for term, found in PLANNER_CAUSES.items():
        assert found and set(found) <= KNOWN_CAUSES, f"{term} -> {found}"


def test_rows_join_terms_that_share_causes_and_keep_unmodelled_causes():
    rows = dict(cause_rows(["compute", "overlap slowdown", "yafsdp_buffers", "fsdp1_flat_grad"]))
    assert rows[("compute", "overlap slowdown")] == (
        causes.COMPUTE_GEMM_ATTENTION,
        causes.COMPUTE_OTHER,
    )
    assert rows[("fsdp1_flat_grad", "yafsdp_buffers")] == (causes.ENGINE,)
    alone = [c for terms, c in cause_rows(["compute"]) if not terms]
    assert (SKEW,) in alone and (causes.COMM_SLOW,) in alone


def _traced_job(
    sweep: Path, job: str, engine: str, late_us: float, predicted: dict | None, **fields
) -> None:
    timed = fields.pop("timed_s", 0.006 + late_us * 1e-6)
    write_job(sweep, job, engine=engine, step_times=[timed] * 5, predicted=predicted,
              **fields)  # fmt: skip
    for rank in (0, 1):
        compute = 1000.0 + (late_us if rank == 1 else 0.0)
        ks = [
            k
            for s in (1, 2)
            for k in (
                Kernel(s, 7, s * 1e4, compute),
                nccl(s, 20, s * 1e4 + compute, 1200.0 + late_us - compute),
                Kernel(s, 7, s * 1e4 + 1200.0 + late_us, 300.0),
            )
        ]
        write_gpu_trace(sweep / job / f"traces/rank{rank}.json.gz", ks, rank=rank, world_size=2)


def test_report_shows_measured_beside_predicted(tmp_path):
    sweep = tmp_path / "sweep"
    breakdown = {"compute": 0.004, "exposed all_gather": 0.0002, "waits for the host": 0.001}
    mine = {"iteration_time_s": 0.0052, "breakdown": breakdown}
    theirs = {"iteration_time_s": 0.0056, "breakdown": {**breakdown, "fsdp1_flat_grad": 4e-4}}
    _traced_job(sweep, "0", "yafsdp", 0.0, mine)
    _traced_job(sweep, "1", "fsdp1", 500.0, theirs)
    text = build_report([sweep], tmp_path / "out").read_text()
    assert "Why (predicted" in text and "Why (measured, from the traces" in text
    block = text[text.index("Why (measured") :]
    assert (
        "fsdp1 against yafsdp: its one pair, repeat 0 (`0`, `1`): traced +0.0003 s on the "
        "slowest rank's step (timed +0.0005 s), largest causes:" in block
    )
    assert "\n- +0.0005 s exposed wait for a rank that arrived late" in block  # top cause first
    assert "- fsdp1: rank 1 arrived late, because compute.gemm_attention" in block
    assert block.index("<details>") < block.index("| cause | measured (s) |")
    skew_row = next(ln for ln in block.splitlines() if f"`{SKEW}`" in ln and ln.startswith("|"))
    assert "| +0.0005 | — | — |" in skew_row  # the planner does not model a late rank
    engine_row = next(ln for ln in block.splitlines() if "(`engine`)" in ln and ln.startswith("|"))
    assert "| +0.0004 | fsdp1_flat_grad |" in engine_row  # predicted, not measured here


def test_a_pair_without_traces_says_so(tmp_path):
    sweep = tmp_path / "sweep"
    write_job(sweep, "0", engine="yafsdp", step_times=[0.9] * 5)
    write_job(sweep, "1", engine="fsdp1", step_times=[1.0] * 5)
    text = build_report([sweep], tmp_path / "out").read_text()
    assert "fsdp1 against yafsdp: its one pair, repeat 0 (`0`, `1`): no measured why (" in text


def test_the_why_explains_the_median_pair_and_names_each_late_job_once(tmp_path):
    """Three repeats against two baselines: the why is the median pair's, named by its
    job directories and repeat; yafsdp's late rank is said once, not once per baseline."""
    sweep = tmp_path / "sweep"
    for r, late in enumerate((100.0, 300.0, 200.0)):  # fsdp1's speedup median: repeat 2
        _traced_job(sweep, f"y{r}", "yafsdp", 50.0, None, repeat=r, repeats=3)
        _traced_job(sweep, f"f{r}", "fsdp1", late, None, repeat=r, repeats=3)
        _traced_job(sweep, f"g{r}", "fsdp2", late, None, repeat=r, repeats=3)
    text = build_report([sweep], tmp_path / "out").read_text()
    block = text[text.index("Why (measured") :]
    assert "fsdp1 against yafsdp: the median of 3 pairs, repeat 2 (`y2`, `f2`)" in block
    yafsdp_late = [ln for ln in text.splitlines() if ln.startswith("- yafsdp: rank 1 arrived")]
    assert len(yafsdp_late) == 1


def test_traces_that_contradict_the_timing_are_one_sentence(tmp_path):
    sweep = tmp_path / "sweep"
    _traced_job(sweep, "0", "yafsdp", 500.0, None, timed_s=0.006)  # traced slower...
    _traced_job(sweep, "1", "fsdp1", 0.0, None, timed_s=0.0065)  # ...timed faster
    text = build_report([sweep], tmp_path / "out").read_text()
    block = text[text.index("Why (measured") :].split("\n## ")[0]
    (line,) = [ln for ln in block.splitlines() if "fsdp1 against yafsdp" in ln]
    assert ": the traces do not explain the timing here (traced " in line
    assert "| cause |" not in block and "<details>" not in block
