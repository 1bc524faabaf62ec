"""`python -m harness.plan.calibrate.accuracy_doc [--check] [-o PATH]`: the accuracy page.

Writes `docs/planner-accuracy.md` from the code as it stands: the public measured runs
against their predictions (`public_runs.py`), the engine-against-engine runs, and the
planner's own output at the published trace's point (Llama 2 34B on 256 GPUs at seq 2048:
`--why` and `--cycle`). Nothing in the page is typed by hand; `--check` exits 1 when the
file differs from what the code prints now (`tests/plan/test_plan_public.py` runs it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[3] / "docs" / "planner-accuracy.md"
POINT = ["experiment=yafsdp_readme", "point=llama2_34b_g256_s2048_c0"]
WHY = "model=llama2_34b,gpus=256,seq=2048"


def _point_blocks() -> list[str]:
    """What `python -m harness.plan <POINT> --why <WHY>` and `... --cycle` print, from one
    plan of the point (the functions the command line prints with)."""
    from harness.plan.cli import format_cycles, format_table, format_why, plan
    from harness.plan.points import rows_at

    dicts = rows_at([r.to_dict() for r in plan(POINT)], WHY)
    why = [format_table(dicts), format_why(dicts)]
    cycles = format_cycles(dicts)
    return [
        "```text", f"$ python -m harness.plan {' '.join(POINT)} --why {WHY}", *why, "```", "",
        "```text", f"$ python -m harness.plan {' '.join(POINT)} --cycle", *cycles, "```",
    ]  # fmt: skip


def render() -> str:
    from harness.plan.calibrate import public_runs as pr

    rows = pr.comparison()
    lines = [
        "# Planner accuracy",
        "",
        "Written by `python -m harness.plan.calibrate.accuracy_doc` from the code as it",
        "stands; `tests/plan/test_plan_public.py` holds this page equal to what it prints.",
        "No constant of the planner was fitted to any figure below.",
        "",
        "## Time against public measured runs",
        "",
        pr.markdown(rows),
        "",
        "Where the sources are silent, the planner assumes:",
        "",
        *(f"- {run.name}: {run.assumed}" for run in pr.RUNS),
        "",
        "## Engine against engine",
        "",
        "Speedup of the first engine over the second, (T_b - T_a) / T_b:",
        "",
        pr.speedup_markdown([pr.predict_speedup(pair) for pair in pr.SPEEDUP_RUNS]),
        "",
        "## One point explained: Llama 2 34B on 256 GPUs at seq 2048",
        "",
        "The point of the YaFSDP README's traces, on the published cluster (four HDR NICs per",
        "node). `ya_fsdp_v1` is upstream YaFSDP v1 as published (the program of the published",
        "column), `yafsdp` this project's engine.",
        "",
        *_point_blocks(),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    prog = "python -m harness.plan.calibrate.accuracy_doc"
    ap = argparse.ArgumentParser(prog=prog, description=__doc__)
    ap.add_argument("--check", action="store_true", help="exit 1 if the page is out of date")
    ap.add_argument("-o", "--output", type=Path, default=DOC, help=f"default: {DOC}")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text() if args.output.is_file() else ""
        if current != text:
            print(f"{args.output} is out of date: run {prog}")
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
