"""The order of a sweep's jobs: each grid point's engines alternate, `repeats` times over.

Hydra's basic sweeper lists jobs as the Cartesian product of the swept values, the last
one varying fastest, so `engine=a,b seq_len=1,2` runs all of a's jobs before any of b's: a
machine that gets busier half-way through would pass for an engine that is slower. Here
the jobs of one grid point (the same overrides apart from `engine` and `engine.*`) run
together, engines alternating, and again for each repeat, each repeat starting one engine
later than the last:

    point 1: A B C  B C A  C A B    point 2: A B C ...   (repeats=3)

so every engine meets the same drift of the machine, and no engine always runs first (a
first run that meets a cold cache or a load that fades within a round would otherwise bias
every paired repeat the same way). Repeat r > 0 of a job carries the
override `repeat=r`, which names its job directory (repeat 0 keeps the name a sweep
without repeats gives it, so such a sweep resumes into more repeats).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from harness.validate import repeat_errors

REPEAT, REPEATS = "repeat", "repeats"
COMPARED = "engine"  # the field whose values are compared at a grid point


class SweepRefused(ValueError):
    """The sweep's repeat settings cannot work; the message says what to change."""


def override_key(override: str) -> str:
    """`+engine.label=x` -> `engine.label`."""
    return override.split("=", 1)[0].lstrip("+~")


def is_compared(override: str) -> bool:
    key = override_key(override)
    return key == COMPARED or key.startswith(COMPARED + ".")


def point_of(job: Sequence[str]) -> tuple[str, ...]:
    """The overrides that place a job at its grid point: all but the engine's and `repeat`."""
    return tuple(o for o in job if not is_compared(o) and override_key(o) != REPEAT)


def alternate(jobs: Iterable[Sequence[str]], repeats: int) -> list[list[str]]:
    """`jobs` (each a list of overrides) grouped by grid point, in the order points first
    appear; within a point the engines alternate, once per repeat, repeat r starting at
    the r-th engine."""
    points: dict[tuple[str, ...], list[list[str]]] = {}
    for job in jobs:
        points.setdefault(point_of(job), []).append(list(job))
    ordered = []
    for runs in points.values():
        for r in range(repeats):
            turn = runs[r % len(runs) :] + runs[: r % len(runs)]
            ordered += [run + [f"{REPEAT}={r}"] if r else list(run) for run in turn]
    return ordered


def sweep_refusals(overrides: Iterable[tuple[str, bool]], repeats: object) -> list[str]:
    """What is wrong with a sweep's repeat settings: `overrides` are (key, is a sweep) of
    the sweep's arguments, `repeats` the composed config's value."""
    errors = []
    for key, swept in overrides:
        key = key.lstrip("+~")
        if key == REPEAT:
            errors.append(
                "repeat is set by the sweep (which run of a job this is); drop repeat=... "
                "and set repeats=N for N runs of every job"
            )
        elif key == REPEATS and swept:
            errors.append(
                "repeats is the number of runs of every job, not a sweep axis; give one "
                "value, e.g. repeats=3"
            )
    return errors or repeat_errors(repeats)


def checked_repeats(overrides: Iterable[tuple[str, bool]], repeats: object) -> int:
    """`repeats` when the sweep's settings can work; else SweepRefused says why."""
    errors = sweep_refusals(overrides, repeats)
    if errors:
        raise SweepRefused("; ".join(errors))
    assert isinstance(repeats, int)
    return repeats
