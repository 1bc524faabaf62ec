"""What a person sees while jobs run: one line per finished job, progress and ETA.

    [ 7/32] llama_mini gpus=2 seq=256 ckpt=1 fsdp1  ok  0.183 s/step  peak 1.21 GiB
            5,400 tok/s  overlap 43%  (elapsed 1:12, ETA 4:05)          (one line)

On a terminal the running job also has a live line (its phase: build, warm-up, timed steps
k/N, profile) that the next line replaces; elsewhere (SLURM output, CI logs) only plain
lines are written. `quiet` keeps only the end-of-sweep summary and failed jobs' lines;
`verbose` streams rank 0's log (its per-step loss lines) as it grows. No progress
library: the display is one rewritten line and a counter, which tqdm and rich would draw
as a bar we do not want, and their plain-file fallbacks would need this same code to stay
one line per job.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

from harness.jobdir.grid_point import POINT_COLUMNS, point_words
from harness.jobdir.paths import JobDir
from harness.jobdir.phase import read_phase
from harness.jobdir.result import Result

# Fields the label names itself; other swept fields are appended as `key=value`.
LABEL_KEYS = frozenset({*POINT_COLUMNS, "engine", "engine.label", "point", "repeat"})


def clock(seconds: float) -> str:
    """1:05, or 1:02:05 past an hour."""
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def job_label(config: dict[str, Any], extra: Iterable[str] = ()) -> str:
    """`llama_mini gpus=2 seq=256 ckpt=1 fsdp1`, `repeat=r` where a job runs more than once,
    plus `extra` (`key=value` overrides)."""
    engine = config["engine"]["label"] if isinstance(config["engine"], dict) else config["engine"]
    point = f"{point_words(config)} {engine}"
    repeat = [f"repeat={config.get('repeat', 0)}"] if config.get("repeats", 1) > 1 else []
    return " ".join([point, *repeat, *extra])


def swept_extras(overrides: Iterable[str], swept: Iterable[str]) -> list[str]:
    """This job's values of the swept fields the label does not already name."""
    keys = set(swept) - LABEL_KEYS
    return [o for o in overrides if o.split("=")[0].lstrip("+~") in keys]


def failed_rank_log(job_dir: Path, error: str | None) -> Path | None:
    """The log of the rank the error names first (the root cause names it), if it exists."""
    m = re.search(r"\brank (\d+)", error or "")
    if m is None:
        return None
    path = JobDir(job_dir).rank_log(int(m.group(1)))
    return path if path.exists() else None


def first_line(text: str | None, limit: int = 160) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    line = lines[0] if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


WHOLE = 10_000  # a first line not cut short


def _later_lines(text: str | None) -> list[str]:
    """The lines of `text` after its first non-empty one, stripped, empty ones dropped."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[1:]


def short_path(path: Path) -> str:
    """Relative to the working directory when below it: console lines stay short."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


class _Unbreakable:
    """A text stream whose reader may go away (`python -m harness -m ... | head -1`, a
    closed terminal): the first failed write silences it for good instead of ending the
    sweep."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.broken = False

    def isatty(self) -> bool:
        try:
            return self._stream.isatty()
        except (OSError, ValueError):
            return False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self._stream.write(text)
            except (OSError, ValueError):  # a closed pipe or terminal; a closed stream
                self._silence()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self._silence()

    def _silence(self) -> None:
        """Point the stream's descriptor at /dev/null: what is still buffered in it, and
        Python's own flush at exit, then meet no broken pipe either."""
        self.broken = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass


def measures(result: Result, job_dir: Path) -> str:
    """`  peak 1.21 GiB  5,400 tok/s  overlap 43%`: what an ok job measured, its overlap
    from its traces (summarised once, into the cache the results table reads next)."""
    m = result.metrics
    peak = m.peak_memory_allocated_bytes or m.peak_rss_bytes
    which = "" if m.peak_memory_allocated_bytes else " RSS"
    parts = [f"peak{which} {peak / 2**30:.2f} GiB" if peak else "peak -"]
    tps = m.tokens_per_s_per_device
    parts.append(f"{tps:,.0f} tok/s" if tps is not None else "tok/s -")
    parts.append(f"overlap {_overlap(job_dir)}")
    return "  " + "  ".join(parts)


def _overlap(job_dir: Path) -> str:
    """Overlap % of the job's traces, "-" with none (profile.steps=0), "?" unreadable."""
    from harness.trace.cache import job_profile
    from harness.trace.summary import find_traces

    if not find_traces(job_dir):
        return "- (no trace)"
    pct = (job_profile(job_dir).get("summary") or {}).get("overlap_pct")
    if pct is None or pct != pct:  # no communication seen, or NaN
        return "?"
    return f"{pct:.0f}%"


def planned_gpu_hours(results: list[Result]) -> str:
    """The dry run's total: the planner's GPU-hours of every job it could price."""
    priced = [(r.metrics.predicted or {}).get("gpu_hours") for r in results if r.ok]
    hours = [h for h in priced if isinstance(h, (int, float))]
    unpriced = len([r for r in results if r.ok]) - len(hours)
    text = f"planned: {sum(hours):.3g} GPU-hours for {len(hours)} job(s) (the planner's step "
    text += "time x steps x GPUs; start-up not included)"
    if unpriced:
        text += f"; {unpriced} job(s) without a time prediction (CPU, or a profile without "
        text += "time figures)"
    return text


class Console:
    """Progress of one sweep (total known) or one job (total None) on `stream`."""

    def __init__(
        self,
        *,
        total: int | None,
        quiet: bool = False,
        verbose: bool = False,
        stream: TextIO | None = None,
    ) -> None:
        self.stream: Any = _Unbreakable(stream or sys.stdout)  # never ends a sweep
        self.total = total
        self.quiet = quiet
        self.verbose = verbose
        self.tty = self.stream.isatty()
        self.started = time.monotonic()
        self.finished: list[tuple[str, Result, Path]] = []  # label, result, job dir
        self.run_seconds: list[float] = []  # jobs that ran (not reused), for the ETA
        self._live = False
        self._job_dir: Path | None = None
        self._job_started = self.started
        self._tail_at = 0

    # --- plain output -------------------------------------------------------------------

    def _write(self, text: str) -> None:
        self._clear_live()
        print(text, file=self.stream, flush=True)

    def line(self, text: str) -> None:
        """One plain line (a single run's closing `result: <path>`)."""
        self._write(text)

    def say(self, text: str) -> None:
        """A remark about the job about to run (a rerun's reason); not when quiet."""
        if not self.quiet:  # every line of a remark indented alike
            self._write("\n".join(f"        {line}" for line in text.split("\n")))

    def _clear_live(self) -> None:
        if self._live:
            self.stream.write("\r\x1b[K")
            self._live = False

    def _counter(self) -> str:
        n = len(self.finished) + 1
        if self.total is None:
            return ""
        width = len(str(self.total))
        return f"[{n:>{width}}/{self.total}] "

    # --- one job ------------------------------------------------------------------------

    def job_started(self, job_dir: Path) -> None:
        self._job_dir = Path(job_dir)
        self._job_started = time.monotonic()
        self._tail_at = 0

    def poll(self, label: str) -> None:
        """Called while the ranks run: the live line, and rank 0's new output if verbose."""
        if self.quiet or self._job_dir is None:
            return
        if self.verbose:
            self._tail(JobDir(self._job_dir).rank_log(0))
        if not self.tty:
            return
        phase = read_phase(self._job_dir) or "starting ranks"
        running = clock(time.monotonic() - self._job_started)
        text = f"{self._counter()}{label}  {phase}  ({running})"
        width = shutil.get_terminal_size((120, 24)).columns - 1
        self.stream.write("\r\x1b[K" + text[:width])
        self.stream.flush()
        self._live = True

    def _tail(self, path: Path) -> None:
        try:
            with open(path, "rb") as f:
                f.seek(self._tail_at)
                chunk = f.read()
        except OSError:
            return
        if chunk:
            self._tail_at += len(chunk)
            self._clear_live()
            self.stream.write(chunk.decode(errors="replace"))
            self.stream.flush()

    def job_finished(self, label: str, result: Result, job_dir: Path, *, ran: bool) -> None:
        if ran:
            if self.verbose and not self.quiet:
                self._tail(JobDir(job_dir).rank_log(0))
            self.run_seconds.append(time.monotonic() - self._job_started)
        line = f"{self._counter()}{label}  {self._verdict(result, job_dir, ran=ran)}"
        dry_run = bool(result.config.get("dry_run"))
        self.finished.append((label, result, job_dir))
        failed = not result.ok and not dry_run  # quiet still says a job failed, and why
        if not self.quiet or failed:
            self._write(line if dry_run else f"{line}  ({self._timing()})")
            if self.total is None:  # a single job has no summary: the rest of its error
                for rest in _later_lines(result.error):  # follows the row, indented
                    self._write(f"  {rest}")
        self._job_dir = None

    def _verdict(self, result: Result, job_dir: Path, *, ran: bool) -> str:
        status = result.status
        if result.config.get("dry_run"):
            verdict = "ok" if result.ok else f"invalid: {first_line(result.error, WHOLE)}"
            return f"dry run -> {job_dir} [{verdict}]"
        if result.ok:
            t = result.metrics.iteration_time_s
            text = f"ok  {t:.3g} s/step" if t is not None else "ok"
            text += "" if ran else "  earlier result kept"
            return text + measures(result, job_dir)
        # A row is one line (an error's first); a single job, with no summary, prints the
        # rest after it, so its first line is not cut.
        text = f"{status}: {first_line(result.error, 160 if self.total is not None else WHOLE)}"
        log = failed_rank_log(job_dir, result.error)
        return text + (f"  (log: {short_path(log)})" if log else "")

    def _timing(self) -> str:
        text = f"elapsed {clock(time.monotonic() - self.started)}"
        left = (self.total or 0) - len(self.finished)
        if left > 0 and self.run_seconds:
            per_job = sum(self.run_seconds) / len(self.run_seconds)
            text += f", ETA {clock(left * per_job)}"
        return text

    # --- the end ------------------------------------------------------------------------

    def summary(
        self,
        *,
        sweep_dir: Path,
        results_csv: Path | None,
        timelines: int = 0,
        statuses: list[str] | None = None,
        interrupted: str | None = None,
        verdict: str | None = None,
    ) -> None:
        """Printed quiet or not: jobs by status, failures, where the results are, what next.

        `statuses` stands in for the jobs this console saw when they ran elsewhere (SLURM).
        """
        self._clear_live()
        seen = [r.status for _, r, _ in self.finished]
        # On an interrupt the files also hold the job cut short, which did not finish.
        counts = Counter(seen or (statuses if not interrupted else None) or [])
        by_status = ", ".join(f"{n} {s}" for s, n in counts.most_common()) or "none finished"
        n = sum(counts.values())
        jobs = f"{n} job" if n == 1 else f"{n} jobs"
        dry_run = any(r.config.get("dry_run") for _, r, _ in self.finished)
        what = "dry run" if dry_run else "sweep"
        took = clock(time.monotonic() - self.started)
        if interrupted:
            done = f"{n} of {self.total} jobs" if self.total else jobs
            head = f"{what} interrupted ({interrupted}) after {done} in {took}: {by_status}"
        else:
            head = f"{what} done: {jobs} in {took}: {by_status}"
        lines = [head]
        if dry_run:
            lines.append(planned_gpu_hours([r for _, r, _ in self.finished]))
        for label, result, job_dir in self.finished:
            if result.status not in ("ok", "interrupted"):
                cause = first_line(result.error, limit=120)
                log = failed_rank_log(job_dir, result.error)
                where = f"  (log: {short_path(log)})" if log else ""
                lines.append(f"  {result.status:<8} {label}: {cause}{where}")
        if results_csv is not None:
            lines.append(f"results:   {short_path(results_csv)}")
            if timelines:
                lines.append(f"timelines: {timelines} in {short_path(sweep_dir / 'timelines')}")
            report = shlex.join(["python", "-m", "harness.report", short_path(sweep_dir)])
            lines.append(f"report:    {report}")
        if verdict:
            lines.append(verdict)
        for line in lines:
            print(line, file=self.stream, flush=True)
