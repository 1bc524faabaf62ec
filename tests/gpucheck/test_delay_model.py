"""Check 6's model against a two-stream simulation of YaFSDP's forward schedule."""

from __future__ import annotations

import pytest

from harness.gpucheck.judging import forward_hiding, judge, overlapped_growth, serial_growth


def simulate_forward(compute: list[float], delay: float, gather: float = 0.0) -> float:
    """End time of the forward: one comm stream running the gathers in issue order (the
    resident one, unit 0, then unit i+1 when unit i starts), compute waiting for each
    unit's gather; gather i+1 may start once unit i-1 is done (its buffer is free)."""
    comm_free = resident_done = delay + gather
    done = {0: (comm_free := comm_free + delay + gather)}
    compute_end = resident_done  # the forward waits for the resident weights first
    for i, c in enumerate(compute):
        if i + 1 < len(compute):
            # issued as unit i starts; its buffer was unit i-1's, done by now
            comm_free = done[i + 1] = max(comm_free, compute_end) + delay + gather
        compute_end = max(compute_end, done[i]) + c
    return compute_end


@pytest.mark.parametrize(
    "compute, delay",
    [
        ([0.1, 1.0, 1.2, 0.9, 1.1, 2.0], 0.5),  # delay shorter than every layer
        ([0.1, 1.0, 1.2, 0.9, 1.1, 2.0], 2.5),  # longer than every unit
        ([0.0, 3.0, 3.0, 3.0, 1.0], 1.5),
    ],
)
def test_model_matches_the_schedule(compute, delay):
    grown = simulate_forward(compute, delay) - simulate_forward(compute, 0.0)
    assert grown == pytest.approx(overlapped_growth(delay, forward_hiding(compute)))
    assert grown < serial_growth(delay, len(compute) + 1)


def test_hiding_order():
    assert forward_hiding([0.1, 1.0, 2.0]) == [0.0, 0.0, 0.1, 1.0]


def test_judge_tells_overlap_from_serial():
    hiding = forward_hiding([0.1, 1.0, 1.0, 1.0, 1.0, 1.0])
    expected, serial = overlapped_growth(1.0, hiding), serial_growth(1.0, len(hiding))
    assert expected == pytest.approx(2.9) and serial == 7.0
    assert judge(expected * 1.05, expected, serial)
    assert not judge(serial, expected, serial)  # no overlap at all
    assert not judge(0.0, expected, serial)  # a delay that did not take effect


def test_negative_delay_is_refused():
    with pytest.raises(ValueError, match="delay_s"):
        overlapped_growth(-1.0, [0.0])
