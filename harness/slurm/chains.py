"""A grid point's jobs on SLURM in the sweep's order, on the same nodes.

The sweep lists each point's jobs in turn, engines alternating (A B A B ...,
harness.sweep.order). Submitted all at once, SLURM would run them side by side on whatever
nodes are free, and an engine's runs would differ by their nodes as much as by the engine.
So each point's jobs go as a chain: the first at once; each next one once its predecessor
has started, with `--dependency=afterany:<predecessor>` (it starts when that one ends, ok
or not) and `--nodelist=<the predecessor's nodes>` (the same nodes, as sacct names them).
Different points still run side by side.

Where the nodes cannot be asked for (sacct names none, or `hydra.launcher.same_nodes=false`)
the chain keeps the order only, and the submitter says so.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from harness.sweep.order import point_of

log = logging.getLogger(__name__)

# sacct states of a job that has not started yet.
NOT_STARTED = frozenset({"", "PENDING", "REQUEUED", "UNKNOWN", "READY", "CONFIGURING"})
NO_NODES = frozenset({"", "None assigned", "(null)"})


class ChainJob(Protocol):
    """What the chain needs of a planned job (harness.slurm.sweep.PlannedJob)."""

    idx: int
    overrides: list[str]
    submitit_job: Any


Submit = Callable[[Any, dict[str, str]], None]  # (job, extra sbatch options) -> submits it
Finish = Callable[[Any, str], None]  # (job, final SLURM state) -> decides its result


def chains_of(jobs: Sequence[ChainJob]) -> list[list[ChainJob]]:
    """The jobs of each grid point, in sweep order; points in the order they first appear."""
    chains: dict[tuple[str, ...], list[ChainJob]] = {}
    for job in jobs:
        chains.setdefault(point_of(job.overrides), []).append(job)
    return list(chains.values())


def link_options(
    state: str, nodes: str, predecessor_id: str, *, same_nodes: bool
) -> dict[str, str] | None:
    """sbatch options for the job after one in state `state` on `nodes`; None while the
    predecessor has not started (its nodes are not known yet)."""
    state = state.split()[0].upper() if state else ""
    if state in NOT_STARTED:
        return None
    options: dict[str, str] = {}
    if state in ("RUNNING", "COMPLETING", "SUSPENDED"):
        options["dependency"] = f"afterany:{predecessor_id}"
    if same_nodes and nodes not in NO_NODES:
        options["nodelist"] = nodes
    return options


class ChainRunner:
    """Submits every chain, each job when its predecessor has started, and finishes each
    job as SLURM ends it. `watcher` is submitit's sacct watcher."""

    def __init__(
        self,
        jobs: Sequence[ChainJob],
        *,
        submit: Submit,
        finish: Finish,
        same_nodes: bool,
        poll_interval_s: float = 1.0,
        max_poll_interval_s: float = 15.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.queues = [deque(chain) for chain in chains_of(jobs)]
        self.last: list[ChainJob | None] = [None] * len(self.queues)
        self.pending: list[ChainJob] = []
        self.submit, self.finish = submit, finish
        self.same_nodes = same_nodes
        self.poll_interval_s, self.max_poll_interval_s = poll_interval_s, max_poll_interval_s
        self.sleep = sleep
        self.watcher: Any = None
        self.unpinned: list[int] = []  # jobs sent without a node list, though chained

    def run(self) -> None:
        for i in range(len(self.queues)):
            self._advance(i)
        interval, last_sacct = self.poll_interval_s, -math.inf
        while self.pending or any(self.queues):
            if self.watcher is None:  # every queue waits on a job never submitted
                break
            ending = any(j.submitit_job.task(0).paths.result_pickle.exists() for j in self.pending)
            if ending or time.monotonic() - last_sacct >= interval:
                self.watcher.update()
                last_sacct = time.monotonic()
                interval = (self.poll_interval_s if ending
                            else min(interval * 2, self.max_poll_interval_s))  # fmt: skip
            self._finish_done()
            for i in range(len(self.queues)):
                self._advance(i)
            if self.pending or any(self.queues):
                self.sleep(self.poll_interval_s)

    def _finish_done(self) -> None:
        still = []
        for job in self.pending:
            job_id = job.submitit_job.job_id
            if self.watcher.is_done(job_id, mode="cache"):
                self.finish(job, self.watcher.get_state(job_id, mode="cache"))
            else:
                still.append(job)
        self.pending = still

    def _advance(self, i: int) -> None:
        """Submit chain i's next jobs: those that need no SLURM job go at once (kept or
        refused), the next real one once its predecessor has started."""
        queue = self.queues[i]
        while queue:
            options = self._options_after(self.last[i])
            if options is None:
                return
            job = queue.popleft()
            self.submit(job, options)
            if job.submitit_job is None:  # a row at once: the predecessor stays the same
                continue
            self.watcher = self.watcher or job.submitit_job.watcher
            if self.last[i] is not None and "nodelist" not in options:
                self.unpinned.append(job.idx)
                self._say_unpinned(job)
            self.last[i] = job
            self.pending.append(job)
            return

    def _options_after(self, predecessor: ChainJob | None) -> dict[str, str] | None:
        if predecessor is None:
            return {}
        sj = predecessor.submitit_job
        info = self.watcher.get_info(sj.job_id, mode="cache") if self.watcher else {}
        return link_options(
            str(info.get("State", "")), str(info.get("NodeList", "")), str(sj.job_id),
            same_nodes=self.same_nodes,
        )  # fmt: skip

    def _say_unpinned(self, job: ChainJob) -> None:
        why = (
            "hydra.launcher.same_nodes=false"
            if not self.same_nodes
            else "sacct named no nodes for the job before it"
        )
        log.warning(
            f"#{job.idx}: submitted after its grid point's previous job, but not pinned to "
            f"its nodes ({why}): the runs of this point may differ by their nodes"
        )
