"""Check 6's model of an injected communication delay, as plain arithmetic.

Each delayed all-gather can hide behind the computation that runs while it is in flight
(the previous unit's forward); what does not fit is exposed. With overlap the step grows
by sum(max(0, delay - hidden_behind)); a schedule that serialises communication and
computation grows by the full delay per collective instead. A measured growth proves the
overlap real when it matches the first and is clearly below the second.
"""

from __future__ import annotations

from collections.abc import Sequence


def overlapped_growth(delay_s: float, hidden_behind_s: Sequence[float]) -> float:
    """Step-time growth when each delayed collective overlaps the compute listed for it."""
    if delay_s < 0:
        raise ValueError(f"delay_s={delay_s} must be 0 or more")
    return sum(max(0.0, delay_s - c) for c in hidden_behind_s)


def serial_growth(delay_s: float, n_collectives: int) -> float:
    """Step-time growth if nothing overlapped: every delay adds in full."""
    return delay_s * n_collectives


def forward_hiding(unit_forward_s: Sequence[float]) -> list[float]:
    """What each forward all-gather of a YaFSDP step hides behind, in issue order.

    The resident (norm) gather and unit 0's gather are waited on before any compute, so
    they hide behind nothing; unit i+1's gather is issued as unit i starts and hides
    behind unit i's forward. The last unit's forward hides no gather.
    """
    return [0.0, 0.0, *unit_forward_s[:-1]]


def judge(
    measured_s: float, expected_s: float, serial_s: float, *, tolerance: float = 0.25
) -> bool:
    """True when the measured growth is within `tolerance` x (serial - expected) of the
    overlap model, and so also nearer it than the serial one."""
    margin = tolerance * max(serial_s - expected_s, 0.0)
    return abs(measured_s - expected_s) <= margin
