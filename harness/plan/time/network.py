"""How long one NCCL collective takes, as NCCL itself prices a ring, or as measured.

`NcclRing` is NCCL's own cost model (src/graph/tuning.cc, `ncclTopoGetAlgoTime`) for the
ring algorithm, the one NCCL runs for all-gather and reduce-scatter across nodes without
IB SHARP: for each protocol (LL, LL128, Simple), a latency of a base plus one step per ring
hop (intra-node hops at NVLink's step latency, or at least the network post overhead once
the ring leaves the node; inter-node hops at the network's), plus the bytes over the
protocol's bus bandwidth; NCCL takes the fastest protocol. Small collectives are
latency-bound and never reach the peak bandwidth.

Bus bandwidth inside a node is NCCL's NVLink ring (channels x per-channel rate). Across
nodes NCCL runs one ring channel per NIC, so the bus bandwidth is NICs per node x each
NIC's achieved rate, capped by NVLink; it declines as nodes are added (fabric hops,
congestion), by a measured fraction per doubling of nodes. Every figure comes from the
hardware profile (`sweeps/hardware/*.yaml`), each with its public source.

`MeasuredNetwork` prices collectives from a calibration (`python -m harness.bandwidth`):
at the measured world size, the measured times themselves (log-log interpolation between
measured sizes); at another, the measured latency per ring step and bus bandwidth, the
latter scaled by the profile's decline with nodes.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

PROTOCOLS = ("LL", "LL128", "Simple")
KINDS = ("all_gather", "reduce_scatter", "all_reduce")
GB = 1e9


@dataclass(frozen=True, slots=True)
class Collective:
    seconds: float
    protocol: str
    bus_gbps: float  # the bus bandwidth it ran at (bytes x (n-1)/n / transfer time)


@dataclass(frozen=True, kw_only=True)
class NcclRing:
    world_size: int
    gpus_per_node: int
    nvlink_channels: int
    nvlink_channel_gbps: float
    nics_per_node: int
    nic_gbps: float  # line rate, Gb/s
    nic_efficiency: float  # achieved fraction of the line rate
    node_decline_per_doubling: float
    decline_from_nodes: int
    base_latency_us: tuple[float, float, float]  # LL, LL128, Simple
    nvlink_step_us: tuple[float, float, float]
    net_step_us: tuple[float, float, float]
    net_overhead_us: float  # per intra-node step once the ring crosses nodes (x3 for Simple)
    ll_max_gbps: tuple[float, float, float]  # LL bus cap: 1 node, 2 nodes, more
    ll128_channel_gbps: float  # LL128 cap per channel
    ll128_efficiency: float = 0.92  # 120 of every 128 bytes carry data
    ll_efficiency: float = 0.5  # half of every LL line is flags
    all_reduce_plateau: float = 1.4  # NCCL's Simple multi-node all-reduce latency factor
    # Measured bus bandwidth (GB/s) per kind at `measured_nodes` nodes (`measured_bus`)
    measured_bus_gbps: tuple[tuple[str, float], ...] = ()
    measured_nodes: int = 0

    @property
    def nodes(self) -> int:
        return max(1, -(-self.world_size // self.gpus_per_node))

    @property
    def nvlink_bus_gbps(self) -> float:
        return self.nvlink_channels * self.nvlink_channel_gbps

    def inter_node_bus_gbps(self) -> float:
        """NICs per node x each NIC's achieved rate (one ring channel per NIC), capped by
        NVLink, less the measured decline per doubling of nodes past `decline_from_nodes`."""
        per_nic = self.nic_gbps / 8 * self.nic_efficiency
        bus = min(self.nics_per_node * per_nic, self.nvlink_bus_gbps)
        doublings = max(0.0, math.log2(self.nodes / self.decline_from_nodes))
        return bus * (1 - self.node_decline_per_doubling) ** doublings

    def measured_bus(self, kind: str) -> float | None:
        """The measured bus bandwidth of `kind` moved to this many nodes by the decline per
        doubling, capped by the NICs' line rate and NVLink; None where none was measured
        (or inside one node)."""
        bus = dict(self.measured_bus_gbps).get(kind, 0.0)
        if not bus or self.nodes == 1 or not self.measured_nodes:
            return None
        doublings = math.log2(self.nodes / self.measured_nodes)
        scaled = bus * (1 - self.node_decline_per_doubling) ** doublings
        line = self.nics_per_node * self.nic_gbps / 8 if self.nics_per_node else scaled
        return min(scaled, line, self.nvlink_bus_gbps)

    def _bus(self, protocol: str) -> float:
        if self.nodes == 1:
            channels, bus = self.nvlink_channels, self.nvlink_bus_gbps
        else:
            channels, bus = self.nics_per_node, self.inter_node_bus_gbps()
        if protocol == "LL":
            return min(self.ll_max_gbps[min(self.nodes, 3) - 1], bus * self.ll_efficiency)
        if protocol == "LL128":
            return min(bus * self.ll128_efficiency, channels * self.ll128_channel_gbps)
        return bus

    def _latency_us(self, protocol: str, kind: str) -> float:
        i = PROTOCOLS.index(protocol)
        rounds = 2 if kind == "all_reduce" else 1
        n, nodes = self.world_size, self.nodes
        steps, inter = rounds * (n - 1), rounds * (nodes - 1)
        if nodes == 1:
            return self.base_latency_us[i] + steps * self.nvlink_step_us[i]
        overhead = self.net_overhead_us * (3 if protocol == "Simple" else 1)
        intra = max(self.nvlink_step_us[i], overhead)
        latency = self.base_latency_us[i] + (steps - inter) * intra + inter * self.net_step_us[i]
        if kind == "all_reduce" and protocol == "Simple":
            latency *= self.all_reduce_plateau
        return latency

    def collective(self, kind: str, nbytes: float) -> Collective:
        """The fastest protocol's time for `kind` of a buffer of `nbytes` (the unsharded
        size: an all-gather's output, a reduce-scatter's input)."""
        n = self.world_size
        if n == 1:
            return Collective(0.0, "none", 0.0)
        rounds = 2 if kind == "all_reduce" else 1
        moved = rounds * nbytes * (n - 1) / n
        best: Collective | None = None
        measured = self.measured_bus(kind)
        for protocol in PROTOCOLS:
            bus = self._bus(protocol)
            seconds = self._latency_us(protocol, kind) * 1e-6 + moved / (bus * GB)
            if protocol == "Simple" and measured:  # busbw includes the latency already
                bus = measured
                seconds = max(self._latency_us(protocol, kind) * 1e-6, moved / (bus * GB))
            if best is None or seconds < best.seconds:
                best = Collective(seconds, protocol, bus)
        assert best is not None
        return best

    def time_s(self, kind: str, nbytes: float) -> float:
        return self.collective(kind, nbytes).seconds


@dataclass(frozen=True)
class MeasuredPoint:
    nbytes: int
    seconds: float


@dataclass(frozen=True, kw_only=True)
class MeasuredNetwork:
    """Collectives priced from a calibration taken at `measured_world_size` ranks."""

    world_size: int
    gpus_per_node: int
    measured_world_size: int
    measured_nodes: int
    points: dict[str, tuple[MeasuredPoint, ...]]  # kind -> sorted by size
    node_decline_per_doubling: float = 0.0
    decline_from_nodes: int = 1
    # gloo has no reduce-scatter: the engines run an all-reduce of the whole input.
    reduce_scatter_is_all_reduce: bool = False

    @property
    def nodes(self) -> int:
        return max(1, -(-self.world_size // self.gpus_per_node))

    def _kind(self, kind: str) -> str:
        """The measured collective that prices `kind`: itself; else the other of all-gather
        and reduce-scatter (the same ring traffic); an all-reduce not measured is priced as
        a reduce-scatter and an all-gather back to back."""
        if kind == "reduce_scatter" and self.reduce_scatter_is_all_reduce:
            kind = "all_reduce"
        for candidate in (kind, "reduce_scatter", "all_gather"):
            if self.points.get(candidate):
                return candidate
        raise ValueError("a calibration must measure an all-gather or a reduce-scatter")

    def time_s(self, kind: str, nbytes: float) -> float:
        if self.world_size == 1:
            return 0.0
        measured = self._kind(kind)
        factor = 2.0 if (kind == "all_reduce" and measured != "all_reduce") else 1.0
        points = self.points[measured]
        if self.world_size == self.measured_world_size:
            return factor * _interpolate(points, nbytes)
        return factor * self._scaled(points, measured, nbytes)

    def _scaled(self, points: tuple[MeasuredPoint, ...], kind: str, nbytes: float) -> float:
        """Another world size: the smallest measured message's time as latency, per ring
        step; the largest's bus bandwidth, declining with nodes as the profile says."""
        rounds = 2 if kind == "all_reduce" else 1
        m, n = self.measured_world_size, self.world_size
        small, large = points[0], points[-1]
        per_step = small.seconds / (rounds * (m - 1))
        bus = rounds * large.nbytes * (m - 1) / m / large.seconds
        decline = (1 - self.node_decline_per_doubling) ** max(
            0.0, math.log2(self.nodes / max(self.measured_nodes, self.decline_from_nodes))
        )
        return per_step * rounds * (n - 1) + rounds * nbytes * (n - 1) / n / (bus * decline)

    def bus_gbps(self, kind: str) -> float:
        """Bus bandwidth of the largest message measured."""
        measured = self._kind(kind)
        large = self.points[measured][-1]
        rounds = 2 if measured == "all_reduce" else 1
        m = self.measured_world_size
        return rounds * large.nbytes * (m - 1) / m / large.seconds / GB


def _interpolate(points: tuple[MeasuredPoint, ...], nbytes: float) -> float:
    """Time at `nbytes` from measured (size, time) points: log-log between neighbours;
    below the smallest, its time (latency-bound); above the largest, its bandwidth."""
    sizes = [p.nbytes for p in points]
    if nbytes <= sizes[0]:
        return points[0].seconds
    if nbytes >= sizes[-1]:
        return points[-1].seconds * nbytes / sizes[-1]
    i = bisect.bisect_left(sizes, nbytes)
    a, b = points[i - 1], points[i]
    w = (math.log(nbytes) - math.log(a.nbytes)) / (math.log(b.nbytes) - math.log(a.nbytes))
    return math.exp(math.log(a.seconds) + w * (math.log(b.seconds) - math.log(a.seconds)))
