"""Measured figures in place of the hardware profile's (`harness.plan calibration=<path>`).

`<path>` is either a calibration file written by `python -m harness.bandwidth`, or a sweep
directory whose jobs probed their own collectives (`probe_bandwidth=true`) and, on GPUs,
recorded the device memory they held outside the caching allocator. From a file or a
sweep, the planner takes the measured all-gather and reduce-scatter times (median over
repeats) at each measured world size; from a sweep also the largest memory outside the
allocator (a fit is decided on it, so the largest, not a typical one). A file may also hold
(or hold only) a `"give_way"` section, written by `python -m harness.plan.probe give-way`:
the measured waits of the SM hand-out rules (`give_way.GiveWayConstants`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.plan.time.give_way import GiveWayConstants, give_way_constants
from harness.plan.time.network import MeasuredPoint

SCHEMA = "yafsdp-bench.calibration/1"
KINDS = ("all_gather", "reduce_scatter", "all_reduce")


@dataclass(frozen=True)
class MeasuredCollectives:
    """One measurement run: its world, and each collective's times by message size."""

    world_size: int
    gpus_per_node: int
    nodes: int
    backend: str
    points: dict[str, tuple[MeasuredPoint, ...]]
    origin: str
    device: str = ""  # the device name the file records ("cpu" for gloo ranks); "" unknown


@dataclass(frozen=True)
class Calibration:
    collectives: tuple[MeasuredCollectives, ...] = ()
    outside_allocator_bytes: int | None = None
    source: str = ""
    measured: tuple[str, ...] = field(default_factory=tuple)  # what it replaces, for the plan
    give_way: GiveWayConstants | None = None  # None: not measured, the public defaults hold

    def for_world(self, world_size: int) -> MeasuredCollectives | None:
        """The run measured at this world size, else the largest one measured."""
        if not self.collectives:
            return None
        exact = [c for c in self.collectives if c.world_size == world_size]
        return exact[0] if exact else max(self.collectives, key=lambda c: c.world_size)


def _whole(data: dict[str, Any], name: str, where: str) -> int | None:
    """`data[name]` as a whole number, None where absent; a ValueError naming the field."""
    value = data.get(name)
    if value is None:
        return None
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if not (numeric and math.isfinite(value) and value == int(value)):
        raise ValueError(f"{where}{name}={value!r} must be a whole number")
    return int(value)


def _number(row: dict[str, Any], name: str, where: str) -> float | None:
    value = row.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where}{name}={value!r} must be a number")
    return float(value)


def _points(rows: object, where: str) -> tuple[MeasuredPoint, ...]:
    """`rows` (a list of {"bytes", "seconds", ...}) as measured points; `where` prefixes
    the field's name in an error (`calibration=<file>: all_gather`)."""
    if rows is None:
        return ()
    if not isinstance(rows, list):
        raise ValueError(f"{where}={rows!r} must be a list of {{bytes, seconds}} rows")
    found = {}
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"{where}[{i}]={row!r} must be a {{bytes, seconds}} row")
        size, seconds = (
            _whole(row, "bytes", f"{where}[{i}]."),
            _number(row, "seconds", f"{where}[{i}]."),
        )
        if size and seconds:
            found[size] = seconds
    return tuple(MeasuredPoint(b, t) for b, t in sorted(found.items()))


def _run(data: dict[str, Any], origin: str, where: str) -> MeasuredCollectives | None:
    """One measurement run; `where` names its place in an error (`calibration=<file>: `)."""
    points = {k: _points(data.get(k), f"{where}{k}") for k in KINDS}
    points = {k: v for k, v in points.items() if v}
    world = _whole(data, "world_size", where)
    per_node = _whole(data, "gpus_per_node", where) or world
    nodes = _whole(data, "nodes", where)
    if not points or not world or world < 2 or not per_node:
        return None  # one rank moves nothing between ranks: no bandwidth to price with
    return MeasuredCollectives(
        world_size=world,
        gpus_per_node=per_node,
        nodes=nodes or max(1, -(-world // per_node)),
        backend=str(data.get("backend", "")),
        points=points,
        origin=origin,
        device=str(data.get("device", "")),
    )


def calibration_from(path: Path) -> Calibration:
    if path.is_file():
        return _from_file(path)
    if not path.is_dir():
        raise ValueError(
            f"calibration={path} is neither a file nor a directory; give the file "
            "`python -m harness.bandwidth -o <file>` wrote, or a sweep directory"
        )
    return _from_sweep(path)


def _from_file(path: Path) -> Calibration:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"calibration={path} is not a readable JSON file: {e}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError(
            f"calibration={path} is not a calibration file (no schema {SCHEMA!r}); write one "
            "with `python -m harness.bandwidth -o <file>`"
        )
    if problem := _unpriceable(data):
        raise ValueError(
            f"calibration={path}: {problem}, so it prices no collective; measure again "
            "with `python -m harness.bandwidth --ranks 2` or more ranks"
        )
    run = _run(data, str(path), f"calibration={path}: ")
    give_way = _give_way(data, path)
    if run is None and give_way is None:
        raise ValueError(f"calibration={path} holds no measured collective and no give_way "
                         "section")  # fmt: skip
    parts = []
    if run is not None:
        parts.append(f"{run.world_size} ranks, {run.nodes} node(s), {run.backend}")
    if give_way is not None:
        parts.append(f"give-way waits on {data['give_way'].get('device', '?')}")
    return Calibration(
        collectives=(run,) if run is not None else (),
        source=f"{path} ({'; '.join(parts)}, measured {data.get('measured_at', '?')})",
        measured=(("collectives",) if run else ()) + (("give_way",) if give_way else ()),
        give_way=give_way,
    )


def _unpriceable(data: dict[str, Any]) -> str | None:
    """Why a calibration file cannot price collectives (a one-rank run measures a bus
    bandwidth of 0), or None."""
    world = data.get("world_size")
    if isinstance(world, int) and world < 2:
        return f"world_size={world}: one rank has no bus"
    for kind in KINDS:
        for row in data.get(kind) or []:
            for name in ("seconds", "bus_gbps"):
                value = row.get(name) if isinstance(row, dict) else None
                if isinstance(value, (int, float)) and not value > 0:
                    return f"{kind} at {row.get('bytes')} bytes has {name}={value:g}"
    return None


def _give_way(data: dict[str, Any], path: Path) -> GiveWayConstants | None:
    if "give_way" not in data:
        return None
    try:
        return give_way_constants(data)
    except ValueError as e:
        raise ValueError(f"calibration={path}: {e}") from None


def _from_sweep(sweep_dir: Path) -> Calibration:
    runs: dict[int, MeasuredCollectives] = {}
    outside: list[int] = []
    for path in sorted(sweep_dir.rglob("result.json")):
        metrics = _metrics(path)
        if metrics.get("device_memory_outside_allocator_bytes") is not None:
            outside.append(int(metrics["device_memory_outside_allocator_bytes"]))
        probe = metrics.get("bandwidth")
        if isinstance(probe, dict):
            run = _run(probe, str(path.parent), f"calibration={sweep_dir}: {path} bandwidth.")
            if run is not None:
                runs.setdefault(run.world_size, run)  # one job per world size suffices
    if not runs and not outside:
        raise ValueError(
            f"calibration={sweep_dir} holds no bandwidth probe and no GPU memory figure; run "
            "the sweep with probe_bandwidth=true (the sweeps' default), or measure with "
            "`python -m harness.bandwidth`"
        )
    measured = (("collectives",) if runs else ()) + (("overhead",) if outside else ())
    return Calibration(
        collectives=tuple(runs[w] for w in sorted(runs)),
        outside_allocator_bytes=max(outside) if outside else None,
        source=f"{len(runs)} probed world size(s), {len(outside)} GPU memory figures "
        f"in {sweep_dir}",
        measured=measured,
    )


def _metrics(path: Path) -> dict[str, Any]:
    """The measured figures of one result.json, through the typed reader; {} for a result
    that cannot be trusted (a half-written or foreign file is skipped, not fatal)."""
    from harness.jobdir.result import CorruptResultError, read_result

    try:
        metrics = read_result(path).metrics
    except CorruptResultError:
        return {}
    return {
        "device_memory_outside_allocator_bytes": metrics.device_memory_outside_allocator_bytes,
        "bandwidth": metrics.bandwidth,
    }


# The collective backend each hardware profile's `device` runs.
BACKEND_OF_DEVICE = {"cuda": "nccl", "cpu": "gloo"}


def hardware_mismatch(measured: Calibration, device: str, device_name: str) -> str | None:
    """Why this calibration was measured on other hardware than the profile's (`device`
    cuda/cpu and its `device_spec.name`), or None. A gloo CPU figure priced as an A100's
    network predicts steps a thousand times too slow."""
    want = BACKEND_OF_DEVICE.get(device)
    for run in measured.collectives:
        if want and run.backend and run.backend != want:
            return (f"{run.origin} was measured with {run.backend} ({run.device or 'device ?'}) "
                    f"but hardware runs {device} with {want}")  # fmt: skip
        family, named = _gpu_family(run.device), _gpu_family(device_name)
        if family and named and family != named:
            return f"{run.origin} was measured on {run.device} but hardware is {device_name}"
    return None


def _gpu_family(name: str) -> str | None:
    """The model number: "NVIDIA A100-SXM4-80GB" -> "A100"; None where no model number is named."""
    import re

    found = re.search(r"\b([A-Z]{1,2}\d{2,4})\b", name.upper().replace("-", " "))
    return found.group(1) if found else None
