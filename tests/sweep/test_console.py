"""What a sweep prints: one line per job, a summary, and nothing of the ranks' own output."""

from __future__ import annotations

import io
import re
from pathlib import Path

from harness.config import JobConfig
from harness.jobdir.paths import JobDir
from harness.jobdir.phase import report_phase
from harness.jobdir.result import Result, make_result
from harness.sweep.console import Console, job_label
from tests.sweep.test_local_sweep import multirun

GRID = (
    "model=llama_tiny",
    "gpus=2",
    "seq_len=32",
    "warmup_steps=1",
    "steps=2",
    "profile.steps=1",  # a profiled pass: Kineto prints its USDT lines from C++
    "engine=local",
    "fault.rank=1",
    "fault.step=1",
    "fault.kind=none,crash",
    "allow_failures=true",  # a drill: the sweep exits 0 with its failed job
)


def test_a_sweep_prints_one_line_per_job_and_a_summary(tmp_path: Path) -> None:
    proc = multirun(*GRID, sweep_dir=tmp_path)
    console = proc.stdout + proc.stderr
    assert "USDT" not in console, "Kineto's output belongs in the rank logs"
    assert "Traceback" not in console, "a rank's traceback belongs in its log"
    assert "HYDRA" not in console and "Launching" not in console, "Hydra's chatter is off"
    lines = proc.stdout.splitlines()
    label = "llama_tiny gpus=2 seq=32 ckpt=0 local"
    ok = re.compile(
        rf"^\[1/2\] {label} fault\.kind=none  ok  [\d.e-]+ s/step  "
        r"peak( RSS)? [\d.]+ GiB  [\d,]+ tok/s  overlap (\d+%|\?)  "
        r"\(elapsed \d+:\d\d, ETA \d+:\d\d\)$"
    )
    assert ok.match(lines[0]), lines
    failed_dir = next(tmp_path.glob("*fault.kind=crash*"))
    log = JobDir(failed_dir).rank_log(1)
    assert lines[1].startswith(f"[2/2] {label} fault.kind=crash  failed: rank 1: "), lines
    assert "injected crash" in lines[1] and f"(log: {log})" in lines[1], lines
    assert re.search(r"\(elapsed \d+:\d\d\)$", lines[1]), "no ETA once every job is done"
    assert re.match(r"^sweep done: 2 jobs in \d+:\d\d: 1 ok, 1 failed$", lines[2]), lines
    assert lines[3].startswith(f"  failed   {label} fault.kind=crash: rank 1: "), lines
    assert lines[4:] == [
        f"results:   {tmp_path / 'results.csv'}",
        f"timelines: 1 in {tmp_path / 'timelines'}",
        f"report:    python -m harness.report {tmp_path}",
        "exit status 0: 1 job is not ok, allowed by allow_failures=true",
    ]
    # Each rank's output is in its own log, C++ output included; the failing rank's
    # traceback is in the log the console line names.
    for job_dir in (p.parent for p in tmp_path.glob("*/result.json")):
        assert JobDir(job_dir).rank_log(0).exists() and JobDir(job_dir).rank_log(1).exists()
    ok_dir = next(tmp_path.glob("*fault.kind=none*"))
    assert "USDT" in JobDir(ok_dir).rank_log(0).read_text() + JobDir(ok_dir).rank_log(1).read_text()
    assert "Traceback" in log.read_text() and "injected crash" in log.read_text()


def test_quiet_keeps_only_the_summary(tmp_path: Path) -> None:
    proc = multirun(*GRID[:-2], "fault.kind=none", "dry_run=true", "quiet=true", sweep_dir=tmp_path)
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("dry run done: 1 job in "), proc.stdout
    assert len(lines) == 2 and lines[1].startswith("planned: 0 GPU-hours for 0 job(s)"), lines


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _result(status: str, **config: object) -> Result:
    cfg = {"model": "llama_mini", "gpus": 2, "seq_len": 256, "ckpt_layers": 1}
    cfg |= {"engine": {"label": "fsdp1"}, **config}
    metrics = {"iteration_time_s": 0.183} if status == "ok" else None
    return make_result(status=status, config=cfg, metrics=metrics)


def test_a_terminal_shows_the_running_jobs_phase_and_a_log_shows_none(tmp_path: Path) -> None:
    (tmp_path / "ranks").mkdir()
    report_phase(tmp_path, 0, "timed steps 3/10")
    report_phase(tmp_path, 1, "build")  # only rank 0 speaks
    label = job_label(_result("ok").config)
    assert label == "llama_mini gpus=2 seq=256 ckpt=1 fsdp1"
    for stream, live in ((_Terminal(), True), (io.StringIO(), False)):
        console = Console(total=32, stream=stream)
        console.job_started(tmp_path)
        console.poll(label)
        assert (f"\r\x1b[K[ 1/32] {label}  timed steps 3/10  (0:00)" in stream.getvalue()) == live
        console.job_finished(label, _result("ok"), tmp_path, ran=True)
        last = stream.getvalue().split("\r\x1b[K")[-1]
        measured = "peak -  tok/s -  overlap - (no trace)"
        head = f"[ 1/32] {label}  ok  0.183 s/step  {measured}  "
        assert re.fullmatch(re.escape(head) + r"\(elapsed 0:0\d, ETA 0:0\d\)\n", last), last


def test_verbose_streams_rank_0s_log(tmp_path: Path) -> None:
    (tmp_path / "ranks").mkdir()
    stream = io.StringIO()
    console = Console(total=1, verbose=True, stream=stream)
    console.job_started(tmp_path)
    JobDir(tmp_path).rank_log(0).write_text("step 1\n")
    console.poll("job")
    with open(JobDir(tmp_path).rank_log(0), "a") as f:
        f.write("step 2\n")
    console.job_finished("job", _result("ok"), tmp_path, ran=True)
    assert stream.getvalue().startswith("step 1\nstep 2\n[1/1] job  ok")


def test_quiet_and_verbose_are_job_config_fields_before_dry_run() -> None:
    names = list(JobConfig.__dataclass_fields__)
    assert names[-3:] == ["quiet", "verbose", "dry_run"]


INDUCTOR = (
    "rank 0: torch._inductor.exc.InductorError: CppCompileError: C++ compile error\n"
    "\n"
    "Command:\ng++ /tmp/x.cpp -shared -fPIC -o /tmp/x.so\n"
    "Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace"
)


def test_a_multi_line_error_keeps_the_jobs_row_on_one_line(tmp_path: Path) -> None:
    failed = make_result(status="failed", config={"model": "llama_tiny"}, error=INDUCTOR)
    refused = make_result(status="invalid", config={"model": "llama_tiny", "dry_run": True},
                          error="gpus=0 must be at least 1\nsecond line")  # fmt: skip
    for total in (None, 2):  # a single job (or an unknown sweep size) and a sweep
        out = io.StringIO()
        console = Console(total=total, stream=out)
        for result in (failed, refused):
            console.job_started(tmp_path)
            console.job_finished("llama_tiny gpus=2", result, tmp_path, ran=True)
        rows = [ln for ln in out.getvalue().splitlines() if "llama_tiny gpus=2" in ln]
        assert len(rows) == 2, out.getvalue()
        assert "InductorError" in rows[0] and re.search(r"\(elapsed \d+:\d\d", rows[0]), rows
        assert "dry run ->" in rows[1] and "gpus=0 must be at least 1" in rows[1], rows
        if total is None:  # a single job has no summary: the rest follows its row, indented
            rest = out.getvalue().split(rows[0], 1)[1].splitlines()[1:]
            assert any("TORCHDYNAMO_VERBOSE" in ln and ln.startswith("  ") for ln in rest)


def test_the_summarys_report_command_is_shell_quoted(tmp_path: Path) -> None:
    import shlex

    sweep = tmp_path / "my sweep;$(x)"
    out = io.StringIO()
    Console(total=1, stream=out).summary(sweep_dir=sweep, results_csv=sweep / "results.csv")
    (line,) = [ln for ln in out.getvalue().splitlines() if ln.startswith("report:")]
    command = line.removeprefix("report:").strip()
    assert shlex.split(command) == ["python", "-m", "harness.report", str(sweep)], line
