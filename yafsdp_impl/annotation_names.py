"""The names of the engine's profiler ranges (`record_function`), built and parsed here alone.

No torch: trace analysis reads these names where torch may be missing. A range names what
the engine does and to which unit: `yafsdp.<kind>.<unit>`, where kind is a collective
(all_gather, reduce_scatter, all_reduce) or a unit's compute (forward, backward), and unit
is the unit's module path in the wrapped model (`layers.3`: the name people know from their
model and FSDP2's ranges), `resident` (the norms and parameters outside every unit) or
`clip` (the all-reduce of the gradients' squared norm). A unit with no path of its own (the
root module itself) is `unit<N>`, the N-th unit in execution order, as every unit was named
in traces written before units were named by path. Waits on a collective are
`yafsdp.wait.<kind>.<unit>`, the wait for everything still in flight is
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
RESERVED = (RESIDENT, CLIP, IN_FLIGHT)  # no unit may be named so

Collective = Literal["all_gather", "reduce_scatter", "all_reduce"]
COLLECTIVES: tuple[Collective, ...] = ("all_gather", "reduce_scatter", "all_reduce")
COMPUTE = ("forward", "backward")

# A unit's name: a module path (dotted, each part a Python identifier or an index).
UNIT = r"\w+(?:\.\w+)*"
_UNIT = re.compile(rf"^{UNIT}$")
# A collective or compute range of one unit; waits and other ranges do not match.
PATTERN = re.compile(rf"^{PREFIX}\.(?P<kind>{'|'.join(COLLECTIVES + COMPUTE)})\.(?P<unit>{UNIT})$")
_INDEXED = re.compile(r"^unit(?P<index>\d+)$")


def unit_name(index: int) -> str:
    """The name of the unit at `index` in execution order where it has no module path."""
    return f"unit{index}"


def indexed_unit(unit: str) -> int | None:
    """N of a unit named by its place alone ('unit3' -> 3); None for any other name."""
    m = _INDEXED.match(unit)
    return int(m.group("index")) if m else None


def is_unit_name(unit: str) -> bool:
    """Whether `unit` can name a unit in a range (and parse back): a dotted module path
    that is none of the reserved names."""
    return bool(_UNIT.match(unit)) and unit not in RESERVED


def collective(kind: Collective, unit: str) -> str:
    """The range around issuing collective `kind` for the unit named `unit`."""
    return f"{PREFIX}.{kind}.{unit}"


def wait(kind: Collective, unit: str) -> str:
    """The range around waiting for collective `kind` of the unit named `unit`."""
    return f"{PREFIX}.wait.{kind}.{unit}"


def forward(unit: str) -> str:
    """The range around the forward of the unit named `unit`."""
    return f"{PREFIX}.forward.{unit}"


def backward(unit: str) -> str:
    """The range around the backward of the unit named `unit`."""
    return f"{PREFIX}.backward.{unit}"


def shard_grad(unit: str) -> str:
    """The range around adding a reduced gradient into the master gradient of `unit`."""
    return f"{PREFIX}.shard_grad.{unit}"


def wait_in_flight() -> str:
    return f"{PREFIX}.wait.{IN_FLIGHT}"


def parse(name: str) -> tuple[str, str] | None:
    """(kind, unit) of a collective or compute range: 'yafsdp.all_gather.layers.3' ->
    ('all_gather', 'layers.3'), 'yafsdp.reduce_scatter.resident' -> ('reduce_scatter',
    'resident'), 'yafsdp.all_reduce.clip' -> ('all_reduce', 'clip'), an older trace's
    'yafsdp.all_gather.unit3' -> ('all_gather', 'unit3'); None for waits and other names."""
    m = PATTERN.match(name)
    if m is None:
        return None
    return m.group("kind"), m.group("unit")
