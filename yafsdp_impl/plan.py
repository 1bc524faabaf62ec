"""Which unsharded weight (and gradient) buffer each unit uses, and how big each one is.

`alternating` (YaFSDP's): two buffers sized to the largest unit; unit i uses buffer i % 2.
`ends_shared`: the first and last units (the embedding and the output projection, often
several layers in size) share one buffer of their own: they are never live together, since
the first unit's backward gathers only after the last unit's backward is done. The units
between alternate two buffers sized to the largest of them, and the staging buffer is
that size too: a larger unit is reduce-scattered through it in chunks. The plan that holds
fewer bytes is chosen.
"""

from __future__ import annotations

from dataclasses import dataclass

from yafsdp_impl.layout import Layout

PLANS = ("min_bytes", "alternating", "ends_shared")


@dataclass(frozen=True, slots=True)
class BufferPlan:
    name: str
    buffer_numel: tuple[int, ...]  # each unsharded weight buffer; gradient buffers mirror it
    buffer_of: tuple[int, ...]  # unit index -> buffer index
    staging_numel: int  # reduce-dtype staging; larger units reduce-scatter in chunks

    def nbytes(self, param_bytes: int, reduce_bytes: int, world_size: int) -> int:
        """Bytes of the weight and gradient buffers, the staging and the reduce-scatter output."""
        staging = self.staging_numel + self.staging_numel // world_size
        return 2 * sum(self.buffer_numel) * param_bytes + staging * reduce_bytes

    def describe(self) -> str:
        sizes = ", ".join(str(n) for n in self.buffer_numel)
        return f"{self.name}: weight buffers of {sizes} elements, staging {self.staging_numel}"


def alternating(layout: Layout) -> BufferPlan:
    big = layout.max_padded_numel
    n = len(layout.units)
    return BufferPlan("alternating", (big, big), tuple(i % 2 for i in range(n)), big)


def ends_shared(layout: Layout) -> BufferPlan | None:
    """None where there is no middle to alternate (fewer than three units)."""
    sizes = [u.padded_numel for u in layout.units]
    if len(sizes) < 3:
        return None
    ends, middle = max(sizes[0], sizes[-1]), sizes[1:-1]
    layer = max(middle)
    n_middle_buffers = min(2, len(middle))
    buffer_of = (0, *(1 + j % 2 for j in range(len(middle))), 0)
    return BufferPlan("ends_shared", (ends, *[layer] * n_middle_buffers), buffer_of, layer)


def choose_plan(
    layout: Layout, choice: str, *, param_bytes: int, reduce_bytes: int, world_size: int
) -> BufferPlan:
    if choice not in PLANS:
        raise ValueError(f"buffer_plan={choice!r} is unknown; choose one of {', '.join(PLANS)}")
    shared = ends_shared(layout)
    if choice == "ends_shared":
        if shared is None:
            raise ValueError("buffer_plan='ends_shared' needs at least three units")
        return shared
    plans = [alternating(layout)]
    if choice == "min_bytes" and shared is not None:
        plans.append(shared)
    return min(plans, key=lambda p: p.nbytes(param_bytes, reduce_bytes, world_size))
