"""The node-split rule has one home, below both pre-flight validation and the SLURM
request, and both refuse the same GPU counts with the same words."""

from __future__ import annotations

import pytest

from harness.config import JobConfig
from harness.node_split import node_split_error
from harness.slurm.resources import ShapeError, job_shape
from harness.validate import validation_errors


@pytest.mark.parametrize(("gpus", "per_node"), [(4, 8), (8, 8), (16, 8), (24, 8), (1, 1)])
def test_counts_that_fill_one_node_or_whole_nodes_split(gpus: int, per_node: int) -> None:
    assert node_split_error(gpus, per_node) is None
    assert job_shape(gpus, per_node, request_gpus=True).world_size == gpus


def test_a_count_past_one_node_that_leaves_a_partial_node_is_refused_alike() -> None:
    error = node_split_error(12, 8)
    assert error is not None and "use gpus=8 or gpus=16" in error
    with pytest.raises(ShapeError) as refused:
        job_shape(12, 8, request_gpus=True)
    assert str(refused.value) == error
    assert error in validation_errors(JobConfig(gpus=12, gpus_per_node=8))
