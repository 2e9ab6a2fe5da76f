"""The outcome of one `pytriton check` check, and how the command line shows and sums them up."""

from __future__ import annotations

import dataclasses
import enum
from typing import Sequence


class Verdict(enum.Enum):
    PASS = "PASS"
    # A fact about a way this machine does not serve (what only the proxy path would need, where
    # pytriton's own backend serves): nothing here to fix; its remedy reads "for the proxy path".
    INFO = "INFO"
    WARN = "WARN"  # works, but something will likely hurt later (e.g. a small /dev/shm)
    FAIL = "FAIL"


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """The outcome of one check: what was found, and on WARN/FAIL what to do about it."""

    name: str
    verdict: Verdict
    detail: str
    remedy: str = ""


def format_result(result: CheckResult, name_width: int = 0) -> str:
    """One line: verdict, check name, what was found, and the remedy unless it passed (an INFO's
    remedy is a choice, not a fix: it reads as it is written)."""
    line = f"{result.verdict.value}  {result.name + ':':<{name_width + 1}} {_one_line(result.detail)}"
    if result.remedy and result.verdict is Verdict.INFO:
        line += f" -- {_one_line(result.remedy)}"
    elif result.remedy and result.verdict is not Verdict.PASS:
        line += f" -- fix: {_one_line(result.remedy)}"
    return line


def _one_line(text: str) -> str:
    return " ".join(text.split())


def exit_status(results: Sequence[CheckResult]) -> int:
    """1 when any check failed, else 0 (a WARN or an INFO does not fail an image build)."""
    return 1 if any(result.verdict is Verdict.FAIL for result in results) else 0
