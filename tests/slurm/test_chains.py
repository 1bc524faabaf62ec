"""A grid point's jobs on SLURM: in the sweep's order, each after the one before it and on
its nodes, points side by side (harness.slurm.chains), against a stand-in SLURM."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from harness.slurm import chains
from harness.slurm.chains import ChainRunner, link_options
from harness.sweep.order import alternate


@dataclass
class FakeCluster:
    """sacct as submitit's watcher reads it: a job starts once its dependency has ended,
    on the nodes it asked for (else its point's own), and ends at the next poll."""

    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)

    def update(self) -> None:
        for job in self.jobs.values():
            if job["State"] == "RUNNING":
                job["State"] = "COMPLETED"
        for job_id, job in self.jobs.items():
            dep = job["options"].get("dependency", "afterany:none").split(":")[1]
            blocked = dep in self.jobs and self.jobs[dep]["State"] != "COMPLETED"
            if job["State"] == "PENDING" and not blocked:
                job["State"] = "RUNNING"
                job["NodeList"] = job["options"].get("nodelist", job["home"])
                self.started.append(job_id)

    def get_info(self, job_id: str, mode: str = "standard") -> dict[str, str]:
        job = self.jobs.get(job_id, {})
        return {"State": job.get("State", ""), "NodeList": job.get("NodeList", "")}

    def get_state(self, job_id: str, mode: str = "standard") -> str:
        return self.get_info(job_id)["State"]

    def is_done(self, job_id: str, mode: str = "standard") -> bool:
        return self.get_state(job_id) not in ("PENDING", "RUNNING", "")


@dataclass
class FakeTime:
    """The runner's clock, advanced by its own sleeps: the sacct back-off runs as on a real
    cluster (1, 2, 4 ... 15 s between reads) without the test waiting those seconds."""

    now: float = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class FakeSubmitted:
    job_id: str
    watcher: FakeCluster
    pickle: Path

    def task(self, rank: int) -> Any:
        return type("T", (), {"paths": type("P", (), {"result_pickle": self.pickle})()})()


@dataclass
class Job:
    idx: int
    overrides: list[str]
    submitit_job: Any = None
    state: str = ""


def run_chains(tmp_path: Path, jobs: list[Job], *, same_nodes: bool = True,
               kept: frozenset[int] = frozenset()) -> tuple[FakeCluster, list]:  # fmt: skip
    cluster, sent = FakeCluster(), []

    def submit(job: Job, options: dict[str, str]) -> None:
        sent.append((job.idx, dict(options)))
        if job.idx in kept:  # an earlier ok result: no SLURM job
            return
        job_id = str(100 + job.idx)
        home = "node-" + next(o for o in job.overrides if o.startswith("seq_len")).split("=")[1]
        cluster.jobs[job_id] = {"State": "PENDING", "options": options, "home": home}
        job.submitit_job = FakeSubmitted(job_id, cluster, tmp_path / "absent.pkl")

    def finish(job: Job, state: str) -> None:
        job.state = state

    clock = FakeTime()
    with mock.patch.object(chains, "time", clock):
        ChainRunner(jobs, submit=submit, finish=finish, same_nodes=same_nodes,
                    sleep=clock.sleep).run()  # fmt: skip
    return cluster, sent


def sweep_jobs(repeats: int) -> list[Job]:
    grid = [[f"seq_len={s}", f"engine={e}"] for s in (32, 64) for e in ("yafsdp", "fsdp1")]
    return [Job(i, o) for i, o in enumerate(alternate(grid, repeats))]


def test_each_point_runs_in_turn_on_its_first_jobs_nodes_and_points_side_by_side(
    tmp_path: Path,
) -> None:
    jobs = sweep_jobs(repeats=2)  # per point: yafsdp fsdp1 yafsdp(r1) fsdp1(r1)
    cluster, sent = run_chains(tmp_path, jobs)
    assert [idx for idx, _ in sent[:2]] == [0, 4], "both points start at once"
    assert sent[0][1] == {} and sent[1][1] == {}
    for idx, options in sent[2:]:
        prev = idx - 1  # the job before it at its point
        assert options["dependency"] == f"afterany:{100 + prev}"
        assert options["nodelist"] == ("node-32" if idx < 4 else "node-64")
    by_point = [[j for j in cluster.started if int(j) - 100 < 4],
                [j for j in cluster.started if int(j) - 100 >= 4]]  # fmt: skip
    assert by_point == [["100", "101", "102", "103"], ["104", "105", "106", "107"]]
    assert {j.state for j in jobs} == {"COMPLETED"}


def test_without_same_nodes_the_order_holds_and_the_launcher_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = sweep_jobs(repeats=1)
    with caplog.at_level(logging.WARNING, logger="harness.slurm.chains"):
        _, sent = run_chains(tmp_path, jobs, same_nodes=False)
    assert all("nodelist" not in options for _, options in sent)
    assert "not pinned to its nodes (hydra.launcher.same_nodes=false)" in caplog.text


def test_a_job_with_a_result_already_is_skipped_and_the_chain_goes_on(tmp_path: Path) -> None:
    jobs = sweep_jobs(repeats=2)
    cluster, sent = run_chains(tmp_path, jobs, kept=frozenset({1}))
    point = [(idx, o) for idx, o in sent if idx < 4]
    assert [idx for idx, _ in point] == [0, 1, 2, 3]
    assert point[2][1]["dependency"] == "afterany:100"  # job 1 ran nowhere: after job 0
    assert jobs[1].state == "" and jobs[3].state == "COMPLETED"


def test_link_options_wait_for_the_predecessor_to_start() -> None:
    assert link_options("PENDING", "", "7", same_nodes=True) is None
    assert link_options("RUNNING", "n[1-2]", "7", same_nodes=True) == {
        "dependency": "afterany:7", "nodelist": "n[1-2]"}  # fmt: skip
    # an ended predecessor needs no dependency (SLURM may have forgotten it)
    assert link_options("COMPLETED", "n1", "7", same_nodes=True) == {"nodelist": "n1"}
    assert link_options("FAILED", "None assigned", "7", same_nodes=True) == {}
    assert link_options("CANCELLED by 0", "n1", "7", same_nodes=False) == {}
