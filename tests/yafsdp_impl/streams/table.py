"""The stream harness's races for every case of the test matrix, with every wait and with
one direction of waiting removed, as a markdown table:

    python -m tests.yafsdp_impl.streams.table
"""

from __future__ import annotations

import pytest
import torch.distributed as dist
from tabulate import tabulate
from torch.testing._internal.distributed.fake_pg import FakeStore

from tests.yafsdp_impl.streams.run import Case, run_case
from tests.yafsdp_impl.streams.test_streams import EXTRA, MATRIX, RELOADS

WORLDS = (1, 3, 8)
DROPS = {"all waits": frozenset(), "no comm waits": frozenset({"comm"}),
         "no compute waits": frozenset({"compute"})}  # fmt: skip


def races(case: Case, world: int, drop: frozenset[str]) -> int:
    if world == 1:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    else:
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    patch = pytest.MonkeyPatch()
    try:
        return len(run_case(case, patch, drop).races)
    finally:
        patch.undo()
        dist.destroy_process_group()


def main() -> None:
    rows = []
    for case in [*MATRIX, *EXTRA, *RELOADS]:
        for world in WORLDS:
            rows.append([str(case), world, *(races(case, world, d) for d in DROPS.values())])
    print(tabulate(rows, headers=["case", "ranks", *DROPS], tablefmt="github"))


if __name__ == "__main__":
    main()
