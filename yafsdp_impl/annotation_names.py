"""The names of the engine's profiler ranges (`record_function`), built and parsed here alone.

No torch: trace analysis reads these names where torch may be missing. A range names what
the engine does and to which unit: `yafsdp.<kind>.<unit>`, where kind is a collective
(all_gather, reduce_scatter, all_reduce) or a unit's compute (forward, backward), and unit
is `unit<N>` (the N-th unit in execution order), `resident` (the norms and parameters
outside every unit) or `clip` (the all-reduce of the gradients' squared norm). Waits on a
collective are `yafsdp.wait.<kind>.<unit>`, the wait for everything still in flight is
`yafsdp.wait.in_flight`, and adding a reduced gradient into a unit's master gradient (with
the step's one division and the shard's squared norm) is `yafsdp.shard_grad.<unit>`.
"""

from __future__ import annotations

import re
from typing import Literal

PREFIX = "yafsdp"
RESIDENT = "resident"  # the resident unit's name (`layout.RESIDENT` is this)
CLIP = "clip"  # what the gradient-norm all-reduce is named after
IN_FLIGHT = "in_flight"

Collective = Literal["all_gather", "reduce_scatter", "all_reduce"]
COLLECTIVES: tuple[Collective, ...] = ("all_gather", "reduce_scatter", "all_reduce")
COMPUTE = ("forward", "backward")

# A collective or compute range of one unit; waits and other ranges do not match.
PATTERN = re.compile(
    rf"^{PREFIX}\.(?P<kind>{'|'.join(COLLECTIVES + COMPUTE)})\."
    rf"(?:unit(?P<index>\d+)|(?P<name>[A-Za-z_]\w*))$"
)


def unit_name(index: int) -> str:
    """The name of the unit at `index` in execution order."""
    return f"unit{index}"


def collective(kind: Collective, unit: str) -> str:
    """The range around issuing collective `kind` for the unit named `unit`."""
    return f"{PREFIX}.{kind}.{unit}"


def wait(kind: Collective, unit: str) -> str:
    """The range around waiting for collective `kind` of the unit named `unit`."""
    return f"{PREFIX}.wait.{kind}.{unit}"


def forward(index: int) -> str:
    """The range around unit `index`'s forward."""
    return f"{PREFIX}.forward.{unit_name(index)}"


def backward(index: int) -> str:
    """The range around unit `index`'s backward."""
    return f"{PREFIX}.backward.{unit_name(index)}"


def shard_grad(unit: str) -> str:
    """The range around adding a reduced gradient into the master gradient of `unit`."""
    return f"{PREFIX}.shard_grad.{unit}"


def wait_in_flight() -> str:
    return f"{PREFIX}.wait.{IN_FLIGHT}"


def parse(name: str) -> tuple[str, str] | None:
    """(kind, unit) of a collective or compute range: 'yafsdp.all_gather.unit3' ->
    ('all_gather', '3'), 'yafsdp.reduce_scatter.resident' -> ('reduce_scatter', 'resident'),
    'yafsdp.all_reduce.clip' -> ('all_reduce', 'clip'); None for waits and other names."""
    m = PATTERN.match(name)
    if m is None:
        return None
    return m.group("kind"), m.group("index") or m.group("name")
