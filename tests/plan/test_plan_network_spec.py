"""The cluster a plan is for: `device_spec.network.*`, and the published cluster's figures.

The YaFSDP README trace (Llama 2 34B on 256 A100s, 32 nodes) shows a 1.384 GB all-gather
in 14.8 ms and a 2.77 GB reduce-scatter in 30.1 ms: 93.1 and 91.7 GB/s bus bandwidth.
"""

from __future__ import annotations

import pytest

from harness.plan.cli import job_configs
from harness.plan.planner import network

AG_BYTES, RS_BYTES = 1.384e9, 2.77e9


def _net(*overrides: str):  # noqa: ANN202
    cfg = job_configs(["experiment=yafsdp_readme", "point=llama2_34b_g256_s2048_c0",
                       "engine=fsdp1", *overrides])[0]  # fmt: skip
    return cfg, network(cfg)


def test_the_published_experiment_prices_the_traces_collectives() -> None:
    cfg, net = _net()
    assert cfg.device_spec.network.nics_per_node == 4
    assert net.time_s("all_gather", AG_BYTES) == pytest.approx(14.8e-3, rel=0.01)
    assert net.time_s("reduce_scatter", RS_BYTES) == pytest.approx(30.1e-3, rel=0.01)


def test_fewer_nodes_run_faster_up_to_the_nics_line_rate() -> None:
    """On 8 nodes the measured 93.1 GB/s, less 5.6% per doubling backwards, would be 104 GB/s:
    four 200 Gb/s NICs cap it at 100 GB/s."""
    _, net = _net("gpus=64")
    assert net.measured_bus("all_gather") == pytest.approx(100.0)


def test_eight_nics_without_measured_figures_derive_from_the_nics() -> None:
    _, four = _net()
    _, eight = _net("device_spec.network.nics_per_node=8",
                    "device_spec.network.all_gather_bus_gbps=0",
                    "device_spec.network.reduce_scatter_bus_gbps=0")  # fmt: skip
    assert eight.measured_bus("all_gather") is None
    assert eight.time_s("all_gather", AG_BYTES) < 0.75 * four.time_s("all_gather", AG_BYTES)
