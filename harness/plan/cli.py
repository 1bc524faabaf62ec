"""`python -m harness.plan <Hydra overrides> [--json] [--cycle] [calibration=<sweep dir>]`

Predict, for every point and engine a job would run, per-GPU peak memory by class,
whether it fits and the fewest checkpointed layers that do, and iteration time split into
compute, exposed communication and other work. Accepts the same fields and presets as a
job: `experiment=yafsdp_readme` expands to its points, comma lists expand as under `-m`
(a single value on the command line, `point=...` or `engine=...`, narrows the experiment's
sweep to it). `--cycle` prints, for each job, one steady-state backward unit
(`cycle.py`): its period, the compute stream's busy and idle time, and each collective's
kernel time and the idle time before it by cause.
`--brief` prints the table and its legend alone; `--why model=llama2_7b,gpus=64,seq=2048`
one point's rows and why each baseline's step differs. A calibration measured on other
hardware (another backend or GPU) is refused unless `--allow-other-hardware`, which makes
the first line a warning. `--own-min-ckpt` plans each engine at its own fewest
checkpointed layers that fit (yafsdp: the faster of the plan its engine chooses and each
pressure plan, each at its own fewest layers) and compares the engines so, as a user
choosing between them would.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

from harness.config import JobConfig
from harness.jobdir.grid_point import point_words
from harness.plan.calibrate.calibration import Calibration
from harness.plan.planner import (
    NEAR_CAPACITY,
    PlanRow,
    add_speedups,
    plan_row,
    planned_only_configs,
)
from harness.plan.points import PlanError, configs_at
from harness.plan.yafsdp_plans import add_plans, own_min_ckpt_rows, smallest_plan_cell

SWEEPS_DIR = Path(__file__).resolve().parents[2] / "sweeps"
DEFAULT_ENGINES = ("yafsdp", "fsdp1", "fsdp2")  # planned where none is named
EXIT_INVALID = 2
USAGE = (
    "usage: python -m harness.plan [--json] [--cycle] [--brief] [--why <point>] "
    "[--own-min-ckpt] [calibration=<file or sweep dir> [--allow-other-hardware]] "
    "[field=value ...]"
)


def job_configs(overrides: list[str], *, default_engines: bool = False) -> list[JobConfig]:
    """Every job the overrides name, sweeps expanded (the experiment's own sweep, then
    comma lists), each checked by the harness's pre-flight; with `default_engines`, each
    of DEFAULT_ENGINES where neither the overrides nor the experiment name an engine."""
    from hydra import compose, initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from harness.validate import unknown_field_errors, validation_errors

    ConfigStore.instance().store(name="job_schema", node=JobConfig)
    OmegaConf.register_new_resolver(
        "harness_unless_dry_run", lambda dry_run, value: None if dry_run else value, replace=True
    )
    parser = OverridesParser.create()
    parsed = parser.parse_overrides(overrides)
    _refuse_unknown_keys([o.get_key_element() for o in parsed])
    fixed = [str(o.input_line) for o in parsed if not o.is_sweep_override()]
    swept = {o.get_key_element(): list(o.sweep_string_iterator()) for o in parsed
             if o.is_sweep_override()}  # fmt: skip
    GlobalHydra.instance().clear()
    configs = []
    with initialize_config_dir(config_dir=str(SWEEPS_DIR), version_base="1.3"):
        preset = compose("config", overrides=fixed, return_hydra_config=True)
        given = {o.get_key_element() for o in parsed}
        for key, values in dict(preset.hydra.sweeper.get("params") or {}).items():
            if key not in swept and key not in given:
                swept[key] = [v.strip() for v in str(values).split(",")]
        named = given & {"engine", "engine.name", "engine.label"} or "engine" in swept
        if default_engines and not named:
            swept["engine"] = list(DEFAULT_ENGINES)  # the comparison, not `local`
        base = compose("config", overrides=fixed)
        fixed_values = [o for o in parsed if not o.is_sweep_override() and not _is_group(o)]
        keys = list(swept)
        for combo in itertools.product(*(swept[k] for k in keys)):
            extra = [f"{k}={v}" for k, v in zip(keys, combo, strict=True)]
            cfg = _applied(base, parser.parse_overrides(extra), fixed_values)
            if cfg is None:  # an option with a defaults list of its own: let Hydra compose
                cfg = compose("config", overrides=fixed + extra)
            as_dict: Any = OmegaConf.to_container(cfg, resolve=False)
            errors = unknown_field_errors(as_dict)
            if errors:
                raise PlanError("; ".join(errors))
            job: JobConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
            errors = validation_errors(job)
            if errors:
                raise PlanError(f"{' '.join(extra) or 'the job'}: " + "; ".join(errors))
            configs.append(job)
    configs += planned_only_configs(configs)  # a ValueError names the field: a refusal
    return configs


def _is_group(override: Any) -> bool:
    return (SWEEPS_DIR / override.get_key_element()).is_dir()


def _applied(base: Any, swept: list[Any], fixed_values: list[Any]) -> Any:
    """`base` with the swept options applied as Hydra would: a group's option file merged
    (at the root for `@package _global_`, else under the group), then the command line's
    values, which win over any option. None where an option has a defaults list."""
    from omegaconf import OmegaConf

    cfg = base.copy()
    for o in [o for o in swept if _is_group(o)]:
        group = o.get_key_element()
        path = SWEEPS_DIR / group / f"{o.value()}.yaml"
        if not path.is_file():
            raise PlanError(f"{group}={o.value()} is not an option of {group}: no {path.name}")
        option = OmegaConf.load(path)
        if "defaults" in option:
            return None
        is_global = "@package _global_" in path.read_text().splitlines()[0]
        cfg = OmegaConf.merge(cfg, option if is_global else {group: option})
    for o in [*fixed_values, *[o for o in swept if not _is_group(o)]]:
        OmegaConf.update(cfg, o.get_key_element(), o.value(), merge=True)
    return cfg


def _refuse_unknown_keys(keys: list[str]) -> None:
    """Name the field a mistyped key most likely meant (Hydra only says it cannot)."""
    import dataclasses
    import difflib

    known = [f.name for f in dataclasses.fields(JobConfig)]
    known += [p.name for p in SWEEPS_DIR.iterdir() if p.is_dir()]  # groups: hardware, point...
    for key in keys:
        top = key.lstrip("+~").split(".")[0].split("@")[0]
        if top not in known:
            close = difflib.get_close_matches(top, known, n=1)
            hint = f"did you mean {close[0]}=?" if close else "see harness/config.py"
            raise PlanError(f"{top} is not a field of the job config; {hint}")


def _gb(n: int | float | None) -> str:
    return "-" if n is None else f"{n / 2**30:.1f}"


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _fitting(get: Any) -> Any:
    """A time column's cell, or "-" on a row that does not fit: a step that cannot run has
    no time, MFU or speedup."""
    return lambda r: "-" if r["fits"] is False else get(r)


def _speedups(r: dict[str, Any], fitting: set[str] | None = None) -> str:
    """Speedup against each baseline (those of this point that fit, where known)."""
    vs = {k: v for k, v in (r["speedup_vs"] or {}).items() if fitting is None or k in fitting}
    return ", ".join(f"{k} {100 * v:+.1f}%" for k, v in vs.items()) or "-"


COLUMNS = (
    ("model", lambda r: r["model"]),
    ("gpus", lambda r: str(r["gpus"])),
    ("seq", lambda r: str(r["seq_len"])),
    ("ckpt", lambda r: str(r["ckpt_layers"])),
    ("engine", lambda r: r["engine"]),
    ("master", lambda r: _gb(r["memory_bytes_by_class"]["master"])),
    ("s.grads", lambda r: _gb(r["memory_bytes_by_class"]["sharded_grads"])),
    ("optim", lambda r: _gb(r["memory_bytes_by_class"]["optimizer"])),
    ("u.weights", lambda r: _gb(r["memory_bytes_by_class"]["unsharded_weights"])),
    ("u.grads", lambda r: _gb(r["memory_bytes_by_class"]["unsharded_grads"])),
    ("staging", lambda r: _gb(r["memory_bytes_by_class"]["staging"])),
    ("act.ckpt", lambda r: _gb(r["memory_bytes_by_class"]["activations_checkpointed"])),
    ("act.plain", lambda r: _gb(r["memory_bytes_by_class"]["activations_plain"])),
    ("logits", lambda r: _gb(r["memory_bytes_by_class"]["logits_loss"])),
    ("ovh", lambda r: _gb(r["memory_bytes_by_class"]["overhead"])),
    ("peak GiB", lambda r: _gb(r["peak_memory_bytes"])),
    ("reserved", lambda r: _gb((r["allocator"] or {}).get("reserved_bytes"))),
    ("plan", lambda r: r["buffer_plan"] or "-"),
    ("smallest plan", lambda r: smallest_plan_cell(r["smallest_plan"])),
    ("fits", lambda r: r.get("fit_verdict") or "-"),
    (
        "min ckpt",
        lambda r: "-" if r["min_ckpt_layers_to_fit"] is None else str(r["min_ckpt_layers_to_fit"]),
    ),  # fmt: skip
    ("iter s", _fitting(lambda r: _s(r["iteration_time_s"]))),
    ("compute", _fitting(lambda r: _s(r["compute_s"]))),
    ("exp.comm", _fitting(lambda r: _s(r["exposed_comm_s"]))),
    ("other", _fitting(lambda r: _s(r["other_s"]))),
    ("stall", _fitting(lambda r: _s(r["stall_s"]))),
    (
        "tok/s",
        _fitting(
            lambda r: (
                "-"
                if r["tokens_per_s_per_device"] is None
                else f"{r['tokens_per_s_per_device']:.0f}"
            )
        ),
    ),  # fmt: skip
    ("MFU", _fitting(lambda r: "-" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%")),
    ("speedup", _fitting(lambda r: _speedups(r, r.get("_fitting_baselines")))),
)

LEGEND = (
    "columns: per-GPU GiB of master = sharded fp32 weights, s.grads = sharded gradients, "
    "optim = optimizer state, u.weights/u.grads = unsharded (gathered) weights/gradients, "
    "staging = collective buffers, act.ckpt/act.plain = activations of checkpointed/other "
    "layers, logits = logits and loss, ovh = memory outside the allocator; reserved = the "
    "caching allocator's (its per-stream pools) with ovh; plan = yafsdp's buffer plan, the "
    "one its times are for; smallest plan = its smallest, with peak and step; fits: yes, "
    f"tight (peak >= {NEAR_CAPACITY:.0%} of the device: no room for the CUDA context, NCCL, "
    "fragmentation) or NO; min ckpt = fewest checkpointed layers that fit; iter s = "
    "compute + exp.comm (communication not hidden) + other + stall; tok/s per GPU; "
    "speedup = (T_baseline - T_yafsdp) / T_baseline, against baselines that fit; a row "
    "that does not fit shows no time"
)


def format_table(rows: list[dict[str, Any]]) -> str:
    _mark_fitting_baselines(rows)
    cells = [[name for name, _ in COLUMNS]] + [[get(r) for _, get in COLUMNS] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def _mark_fitting_baselines(rows: list[dict[str, Any]]) -> None:
    """On each row, the engines of its point that fit (or whose fit is unknown)."""
    for r in rows:
        r["_fitting_baselines"] = {o["engine"] for o in rows if _point(o) == _point(r)
                                   and o["fits"] is not False}  # fmt: skip


def _point(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["model"], r["gpus"], r["seq_len"], r["ckpt_layers"], r["micro_batch"], r["dtype"])


def format_why(rows: list[dict[str, Any]]) -> str:
    """For each yafsdp row, the lines saying why each baseline's step differs."""
    out = []
    for r in rows:
        for lines in (r.get("why") or {}).values():
            out.append(f"{point_words(r)}: {lines[0]}")
            out.extend(f"  {line}" for line in lines[1:])
    return "\n".join(out)


def format_constants(rows: list[dict[str, Any]], origin_only: bool = False) -> str:
    """Each figure the predictions rest on, once per hardware profile: its value, and
    whether it was measured or comes from a datasheet or publication."""
    out, seen = [], set()
    for r in rows:
        constants = r.get("constants")
        if not constants:
            continue
        key = json.dumps(constants, sort_keys=True, default=str)
        if key in seen:
            continue
        seen.add(key)
        out.append(f"constants for {r['model']} on {r['gpus']} GPUs and the profiles like it:")
        for name, c in constants.items():
            out.append(f"  {name} = {c['value']}  [{c['origin']}]")
    return "\n".join(out)


def plan(overrides: list[str], measured: Calibration | None = None, ablate: bool = True
         ) -> list[PlanRow]:  # fmt: skip
    rows = [plan_row(cfg, measured, ablate=ablate) for cfg in job_configs(overrides)]
    add_speedups(rows)
    add_plans(rows, measured)
    return rows


def _take_value(args: list[str], flag: str) -> tuple[list[str], str | None]:
    """`args` without `flag <value>` (or `flag=<value>`), and the value."""
    for i, a in enumerate(args):
        if a == flag:
            if i + 1 >= len(args):
                raise PlanError(f"{flag} needs a point, e.g. {flag} model=llama2_7b,gpus=64")
            return args[:i] + args[i + 2 :], args[i + 1]
        if a.startswith(flag + "="):
            return args[:i] + args[i + 1 :], a.split("=", 1)[1]
    return args, None


def _print_plan(dicts: list[dict[str, Any]], brief: bool, measured: Calibration | None) -> None:
    print(format_table(dicts))
    print(LEGEND)
    if brief:
        return
    why = format_why(dicts)
    if why:
        print("\nwhy each baseline's predicted step differs from yafsdp's (term by term):")
        print(why)
    constants = format_constants(dicts)
    if constants:
        print()
        print(constants)
    if measured is not None:
        print(f"calibration: measured figures from {measured.source}")


def _calibration_warning(measured: Calibration | None, configs: list[JobConfig],
                         allow: bool) -> str | None:  # fmt: skip
    """A calibration measured on other hardware than the plan's: refused (PlanError), or
    with --allow-other-hardware, the warning the output opens with."""
    from harness.plan.calibrate.calibration import hardware_mismatch

    if measured is None:
        return None
    for cfg in configs:
        why = hardware_mismatch(measured, cfg.device, cfg.device_spec.name)
        if why is None:
            continue
        if not allow:
            raise PlanError(f"calibration from other hardware: {why}; measure on the "
                            "hardware you plan for (`python -m harness.bandwidth` under its "
                            "torchrun or srun), or pass --allow-other-hardware to price with "
                            "it anyway")  # fmt: skip
        return (
            f"WARNING: calibration from other hardware ({why}); its times are not this hardware's"
        )
    return None


# The command line's switches, in the order main unpacks them.
FLAGS = ("--json", "--cycle", "--brief", "--allow-other-hardware", "--own-min-ckpt")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    as_json, as_cycle, brief, allow_other, own_min = (f in args for f in FLAGS)
    args = [a for a in args if a not in FLAGS]
    if any(a in ("-h", "--help") for a in args):
        print(USAGE + "\n\n" + (__doc__ or "").strip())
        return 0
    calibration = [a for a in args if a.startswith("calibration=")]
    args = [a for a in args if not a.startswith("calibration=")]
    try:
        args, why_point = _take_value(args, "--why")
        measured = None
        if calibration:
            from harness.plan.calibrate.calibration import calibration_from

            measured = calibration_from(Path(calibration[-1].split("=", 1)[1]))
        configs = job_configs(args, default_engines=True)
        warning = _calibration_warning(measured, configs, allow_other)
        configs = configs if why_point is None else configs_at(configs, why_point)
        rows = [plan_row(cfg, measured) for cfg in configs]
        rows = own_min_ckpt_rows(rows, measured) if own_min else rows
        add_speedups(rows, same_ckpt=not own_min)
        add_plans(rows, measured)
        dicts = [r.to_dict() for r in rows]
    except (PlanError, ValueError) as e:
        print(f"[harness.plan] refused: {e}", file=sys.stderr)
        return EXIT_INVALID
    except Exception as e:  # Hydra's own errors (an unknown preset, a bad override)
        if type(e).__module__.startswith(("hydra", "omegaconf")):
            print(f"[harness.plan] refused: {e}", file=sys.stderr)
            return EXIT_INVALID
        raise
    if warning:  # the first line a reader sees (stderr beside JSON, which must parse)
        print(warning, file=sys.stderr if as_json else sys.stdout)
    if as_cycle and not as_json:
        print("\n".join(format_cycles(dicts)))
        return 0
    if as_json:
        print(json.dumps(dicts, indent=1))
    elif why_point is not None:
        print(format_table(dicts))
        print(
            format_why(dicts) or "no yafsdp row with a baseline at this point: nothing to explain"
        )
    else:
        _print_plan(dicts, brief, measured)
    return 0


def format_cycles(dicts: list[dict]) -> list[str]:
    """What `--cycle` prints: each row's steady-state backward cycle, labelled by its point."""
    from harness.plan.time.cycle import format_cycle

    return [format_cycle(f"{r['engine']} {point_words(r)}", r.get("cycle")) for r in dicts]
