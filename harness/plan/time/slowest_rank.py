"""The slowest of W ranks at every link of a chain (R5 per link; `handout.py`).

A collective starts when the last of W ranks has finished the chain of kernels before it
(FSDP1's cat, cast and pre-divide, then the reduce-scatter itself). Each rank's wait for
the SMs along that chain is a sum of per-link waits, independent across ranks:
- the first link meets the compute kernel running when it becomes ready, at a phase of that
  kernel that is uniform across ranks: a wait uniform on [0, spread] (spread: the kernel's
  duration at equal priority, one wave at a higher one);
- each further link at the compute stream's priority becomes ready as the link before it
  ends, together with the compute kernel that waited behind that link: two pending kernels
  of equal priority, and which the GPU dispatches first is a race (the README trace of
  yandex/YaFSDP shows it won in one layer and lost in the next). A lost race waits that
  compute kernel's duration d, a won one nothing: d with probability p, the race-loss
  probability (1/2 with no reason to favour either; the one-GPU probe measures it,
  `harness/gpucheck/suite_s/probe.py`).
The collective's expected start is E[max(own, T_2, ..., T_W)], where own is this rank's
expected wait and T_r the others' (the sum of a uniform and Bernoulli-weighted durations);
with F the distribution of T,
    E[max(own, M)] = own + integral from own to the largest T of (1 - F(t)**(W-1)) dt,
worked out on a grid. Not the worst case: at W = 256 a chain of two races of 1 ms each
after a 1 ms uniform link waits about 2.7 ms, not 3.
"""

from __future__ import annotations

import functools

import numpy as np

GRID = 512  # points of the integral


def race_sums(races: tuple[float, ...], p: float) -> tuple[np.ndarray, np.ndarray]:
    """The distribution of the sum of the lost races: its values and their probabilities."""
    dist: dict[float, float] = {0.0: 1.0}
    for d in races:
        step: dict[float, float] = {}
        for value, prob in dist.items():
            for add, q in ((0.0, 1.0 - p), (d, p)):
                if q > 0:
                    key = round(value + add, 9)
                    step[key] = step.get(key, 0.0) + prob * q
        dist = step
    values = np.array(sorted(dist))
    return values, np.array([dist[v] for v in sorted(dist)])


@functools.lru_cache(maxsize=4096)
def _expected_max(own: float, spread: float, races: tuple[float, ...], p: float, world: int
                  ) -> float:  # fmt: skip
    values, probs = race_sums(races, p)
    top = spread + float(values[-1])
    if top <= own:
        return own
    t = np.linspace(own, top, GRID)
    if spread > 0:
        cdf = (np.clip((t[:, None] - values[None, :]) / spread, 0.0, 1.0) * probs).sum(axis=1)
    else:
        cdf = ((t[:, None] >= values[None, :]) * probs).sum(axis=1)
    tail = 1.0 - np.clip(cdf, 0.0, 1.0) ** (world - 1)
    return own + float(np.trapezoid(tail, t))


def expected_chain_extra(
    own: float, spread: float, races: tuple[float, ...], p: float, world: int
) -> float:
    """The expected extra wait for the last of `world` ranks, given this rank's expected
    chain wait `own`, the first link's spread and the further links' race durations."""
    if world <= 1 or (spread <= 0 and not races):
        return 0.0
    key = (round(own, 7), round(spread, 7), tuple(round(d, 7) for d in races))
    return max(_expected_max(*key, round(p, 6), world) - key[0], 0.0)
