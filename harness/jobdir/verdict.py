"""A finished job's status and error from the evidence it left: one rule for both
launchers (the local runner's harness.job.run.decide_result and the SLURM submitter's
harness.slurm.job_end.decide), so that the same failure reads the same under either.

Each launcher gathers what it alone can know (its wall-clock kill, SLURM's state, its rank
launcher's death, the kernel's OOM kills) into `Evidence`; `verdict` words it. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.jobdir.rank_outcome import RankOutcome, root_cause


@dataclass(frozen=True)
class Evidence:
    """What a launcher knows about how a job's ranks ended."""

    outcomes: list[RankOutcome]  # recorded by the ranks, plus those the launcher saw die
    world_size: int
    collective_timeout_s: float
    wall_clock: str | None = None  # set when the job ran past job_timeout_s: who ended it
    launcher_death: str | None = None  # the ranks' launcher died under them: how
    oom_kills: int = 0  # kernel OOM kills in the job's cgroup while it ran


def wall_clock_error(job_timeout_s: float, how: str) -> str:
    """The one wording of a job ended for running past its wall-clock limit."""
    return f"job exceeded its wall-clock limit job_timeout_s={job_timeout_s:g} ({how})"


def silent_ranks(evidence: Evidence) -> list[int]:
    """Ranks that left neither an outcome nor an exit the launcher saw."""
    return sorted(set(range(evidence.world_size)) - {o.rank for o in evidence.outcomes})


def verdict(evidence: Evidence) -> tuple[str, str] | None:
    """(status, error) of the job, or None when every rank that reported is ok and nothing
    else went wrong (the caller then checks rank 0's result.json)."""
    outcomes = evidence.outcomes
    cause = root_cause(outcomes, world_size=evidence.world_size)
    if evidence.wall_clock is not None:
        return "timeout", evidence.wall_clock + (f"; {cause[1]}" if cause else "")
    if evidence.launcher_death is not None:  # its ranks' own errors are its echo
        return "failed", f"{evidence.launcher_death}; its ranks ended with it"
    if cause is None:
        return None
    status, error = _named_oom_kill(evidence, cause)
    missing = silent_ranks(evidence)
    if status == "timeout" and missing:
        error = (
            f"rank {', '.join(map(str, missing))} stopped answering and left no outcome: the "
            f"others timed out waiting for ranks {missing} in a collective "
            f"(collective_timeout_s={evidence.collective_timeout_s:g}); {error}"
        )
    elif missing:
        error += f" (ended without an outcome: ranks {missing})"
    named = error.split(":", 1)[0]
    others = sorted(
        o.rank for o in outcomes if not o.ok and not o.unrecorded and f"rank {o.rank}" != named
    )
    if others and status != "timeout":
        error += f" (also ended badly: ranks {others})"
    return status, error


def _named_oom_kill(evidence: Evidence, cause: tuple[str, str]) -> tuple[str, str]:
    """A rank killed by SIGKILL while the kernel's OOM killer fired in the job's cgroup was
    that kill: an out-of-memory, not an anonymous SIGKILL."""
    status, error = cause
    if evidence.oom_kills and error.endswith("was killed (SIGKILL)"):
        return "oom", (
            f"{error} by the kernel's out-of-memory killer ({evidence.oom_kills} OOM kill(s) "
            "in the job's cgroup, memory.events)"
        )
    return status, error
