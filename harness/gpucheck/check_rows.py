"""One row of the gpu-check table, how a check is run into one, and the exit code."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

PASS, FAIL, SKIP, ERROR = "pass", "fail", "skip", "error"
RESULTS = (PASS, FAIL, SKIP, ERROR)


@dataclass(kw_only=True)
class Check:
    """One row: which check, what it proves, its result and the figures it measured."""

    suite: str  # "A", "B" or "C"
    check: str  # e.g. "1 parity" or "8 llama2_7b_g64_s2048_c0 fsdp1"
    proves: str
    result: str
    figures: dict[str, Any] = field(default_factory=dict)
    detail: str = ""  # why it failed, errored or was skipped

    def __post_init__(self) -> None:
        if self.result not in RESULTS:
            raise ValueError(f"result={self.result!r} is unknown; choose one of {RESULTS}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Verdict(NamedTuple):
    """What a check function returns: passed or not, its figures, and why (if not)."""

    ok: bool
    figures: dict[str, Any]
    detail: str = ""
    skipped: bool = False  # the check could not be carried out here (e.g. does not fit)


def run_check(suite: str, check: str, proves: str, fn: Callable[[], Verdict]) -> Check:
    """Run one check; an exception becomes an `error` row holding the end of its traceback."""
    print(f"[gpu-check] {suite} {check} ...", flush=True)
    try:
        verdict = fn()
    except Exception as e:  # a broken check is a row, and the other checks still run
        tail = traceback.format_exc().strip().splitlines()[-6:]
        row = Check(
            suite=suite,
            check=check,
            proves=proves,
            result=ERROR,
            detail=f"{type(e).__name__}: {e}".strip() + " | " + " / ".join(tail),
        )
    else:
        row = Check(
            suite=suite,
            check=check,
            proves=proves,
            result=SKIP if verdict.skipped else PASS if verdict.ok else FAIL,
            figures=verdict.figures,
            detail=verdict.detail,
        )
    print(f"[gpu-check] {suite} {check}: {row.result} {row.detail}".rstrip(), flush=True)
    return row


def skipped(suite: str, check: str, proves: str, why: str) -> Check:
    return Check(suite=suite, check=check, proves=proves, result=SKIP, detail=why)


def counts(rows: Iterable[Check]) -> dict[str, int]:
    out = dict.fromkeys(RESULTS, 0)
    for r in rows:
        out[r.result] += 1
    return out


def exit_code(rows: Iterable[Check]) -> int:
    """0 when nothing failed or errored (skips are fine: a CPU machine skips the GPU suites)."""
    c = counts(rows)
    return 1 if c[FAIL] or c[ERROR] else 0
