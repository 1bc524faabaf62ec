"""Suite D: the give-way probe on one GPU (`python -m harness.plan.probe give-way`).

It measures how long a side-stream kernel waits for SMs behind the model's own GEMMs, at
stream priority 0 and -1, and writes the calibration file the planner reads
(`calibration=`): `give_way_calibration.json` beside the report (and in `$OUT`). The row
passes when every constant of the give_way section was measured and the file reads back
into the planner's constants; its figures are the measured constants.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from harness.gpucheck.check_rows import Check, Verdict, run_check

FILE = "give_way_calibration.json"
MODEL, SEQ_LEN = "llama2_34b", 2048
MEASURED = (
    "equal_priority_wait",
    "high_priority_wait_waves",
    "collective_equal_priority_wait",
    "collective_high_priority_wait_waves",
)
NAME = (
    "9 give-way probe",
    f"{MODEL} seq {SEQ_LEN} backward GEMMs on the compute stream; a side kernel's wait for "
    "SMs at priority 0 (share of the running GEMM left) and -1 (in its waves), for the "
    "gradient cast/divide and a collective stand-in; written as a calibration file",
)
NAMES = [NAME]


def outputs(device_dir: Path) -> list[Path]:
    """Where the calibration file goes: the device's report folder, and `$OUT` when set."""
    out = [device_dir / FILE]
    if os.environ.get("OUT"):
        out.append(Path(os.environ["OUT"]) / FILE)
    return out


def check(device_dir: Path) -> Verdict:
    from harness.plan.calibrate import give_way_probe
    from harness.plan.calibrate.calibration import calibration_from

    first, *copies = outputs(device_dir)
    first.parent.mkdir(parents=True, exist_ok=True)
    code = give_way_probe.main(["-o", str(first), "--model", MODEL, "--seq-len", str(SEQ_LEN)])
    if code != 0:
        return Verdict(False, {}, f"the probe exited {code}")
    for extra in copies:
        extra.write_text(first.read_text())
    if calibration_from(first).give_way is None:
        return Verdict(False, {}, f"{first} holds no give_way section")
    section = json.loads(first.read_text())["give_way"]
    missing = [k for k in MEASURED if k not in section]
    figures = {k: section[k] for k in (*MEASURED, "sm_count") if k in section}
    figures["file"] = str(first)
    return Verdict(not missing, figures, f"not measured: {', '.join(missing)}" if missing else "")


# Suite D's work, for its estimate (harness.gpucheck.schedule): the probe's two priorities,
# each for the gradient cast/divide and the collective stand-in.
WORK = {"process group": 1, "probe kernel set": 4}


def run(device_dir: Path, on_row: Callable[[Check], None] = lambda row: None) -> list[Check]:
    row = run_check("D", *NAME, lambda: check(device_dir))
    on_row(row)
    return [row]
