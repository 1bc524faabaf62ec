"""`python -m harness.plan.probe <command>`: the probes that run on a device, not under fake
tensors. A module of its own, so the probes it starts may use the planner, whose models
read the fake-tensor probes of this package."""

from __future__ import annotations

import sys

COMMANDS = {
    "give-way": "the SM hand-out rules' waits, on one CUDA GPU "
    "(harness/plan/calibrate/give_way_probe.py)"
}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in COMMANDS:
        listed = "; ".join(f"{name}: {what}" for name, what in COMMANDS.items())
        asked = args[:1] in (["-h"], ["--help"])  # asked for: stdout, exit 0
        print(f"usage: python -m harness.plan.probe <command> [options]; commands: {listed}",
              file=sys.stdout if asked else sys.stderr)  # fmt: skip
        return 0 if asked else 2
    from harness.plan.calibrate.give_way_probe import main as give_way

    return give_way(args[1:])
