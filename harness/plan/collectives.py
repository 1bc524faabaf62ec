"""The alpha-beta ring model of one collective: latency per ring step plus bytes over the
bus bandwidth, as NCCL's own tuning model (src/graph/tuning.cc) prices a ring."""

from __future__ import annotations

from dataclasses import dataclass

GB = 1e9


@dataclass(frozen=True, slots=True)
class Network:
    """Where a collective runs: world size, nodes, and the figures that price it."""

    world_size: int
    gpus_per_node: int
    intra_bus_gbps: float
    inter_bus_gbps: float
    base_latency_us: float
    intra_step_latency_us: float
    inter_step_latency_us: float
    # gloo has no reduce-scatter: it is an all-reduce of the whole input (twice the bytes).
    reduce_scatter_is_all_reduce: bool = False

    @property
    def nodes(self) -> int:
        return max(1, -(-self.world_size // self.gpus_per_node))

    def bus_gbps(self) -> float:
        return self.inter_bus_gbps if self.nodes > 1 else self.intra_bus_gbps

    def time_s(self, kind: str, nbytes: float) -> float:
        """Seconds for `kind` (all_gather, reduce_scatter, all_reduce) of a buffer of
        `nbytes` (the unsharded size)."""
        p = self.world_size
        if p == 1:
            return 0.0
        if kind == "reduce_scatter" and self.reduce_scatter_is_all_reduce:
            kind = "all_reduce"
        rounds = 2 if kind == "all_reduce" else 1  # an all-reduce is a reduce-scatter + all-gather
        steps, inter_steps = rounds * (p - 1), rounds * (self.nodes - 1)
        latency_us = (
            self.base_latency_us
            + (steps - inter_steps) * self.intra_step_latency_us
            + inter_steps * self.inter_step_latency_us
        )
        transfer = rounds * nbytes * (p - 1) / p / (self.bus_gbps() * GB)
        return latency_us * 1e-6 + transfer
