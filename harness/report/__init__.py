"""The report: `report.md` plus figures from sweep directories' result files (no torch).

python -m harness.report <sweep dir> [<sweep dir> ...] [-o out dir]
"""

from harness.report.render import build_report

__all__ = ["build_report"]
