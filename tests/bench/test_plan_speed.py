"""The planner over the 16 published points, each with every engine and the published
program (64 rows: yafsdp, fsdp1, fsdp2 and the planned ya_fsdp_v1): the target
is under 10 s on one core once the kernel census is on disk (the first call probes each
model once and keeps it).

    make bench      # or: pytest tests/bench/test_plan_speed.py --benchmark-enable -s
"""

from __future__ import annotations

from harness.plan.cli import plan
from tests.bench.rounds import ROUNDS

TARGET_S = 10.0


def test_the_published_experiment_plans_in_under_10_s(benchmark) -> None:  # noqa: ANN001
    plan(["experiment=yafsdp_readme"])  # warm the disk cache of kernel censuses
    rows = benchmark.pedantic(plan, args=(["experiment=yafsdp_readme"],), rounds=ROUNDS,
                              iterations=1)  # fmt: skip
    assert len(rows) == 64
    assert benchmark.stats.stats.max < TARGET_S
