"""How a process ended, in words: wait statuses, return codes, and what a dead stub left behind.

Shared by the server's supervisor (a stub or tritonserver that died) and the parent of a process
instance (a worker process that died), so that both say it the same way.
"""

from __future__ import annotations

import signal
from typing import List, Optional, Sequence


def read_exit_status(pid: int) -> Optional[int]:
    """The wait status of zombie `pid` (from ``/proc/<pid>/stat``), or None when unknown.

    A stub is tritonserver's child, so only the server could wait for it; but Linux shows the
    exit status of a zombie in the last field of its ``stat`` line, which tells a SIGKILL (the OOM
    killer) from a SIGSEGV or an exit.
    """
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            text = stat.read()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    # Fields after the name start at field 3 (state); exit_code is field 52.
    if len(fields) < 50 or fields[0] != "Z":
        return None
    try:
        return int(fields[49])
    except ValueError:
        return None


_FATAL_ERRORS = {
    "Segmentation fault": signal.SIGSEGV,
    "Floating point exception": signal.SIGFPE,
    "Floating-point exception": signal.SIGFPE,
    "Aborted": signal.SIGABRT,
    "Bus error": signal.SIGBUS,
    "Illegal instruction": signal.SIGILL,
}


def read_fault_trace(path: Optional[str]) -> Optional[int]:
    """The wait status a stub's fault trace tells (see `protocol.fault_trace_path`), or None.

    `faulthandler` writes "Fatal Python error: Segmentation fault" and the like for the fatal
    signals a process can catch; a stub that died by one of them is described by it.
    """
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as trace:
            text = trace.read(4096)
    except OSError:
        return None
    for words, number in _FATAL_ERRORS.items():
        if f"Fatal Python error: {words}" in text:
            return int(number)
    return None


def describe_stub_death(status: Optional[int], traced: bool) -> str:
    """Words for how a stub died: its wait status when known (a zombie's, or a fault trace's);
    a stub gone without either was killed by SIGKILL, the one fatal signal nothing can catch
    (kill -9, the OOM killer), once `traced` says its proxy was recording the others."""
    if status is None and traced:
        return "vanished without a trace: killed by signal 9 (SIGKILL), by kill -9 or the OOM killer"
    return describe_wait_status(status)


def describe_wait_status(status: Optional[int]) -> str:
    """Human words for a wait status: "killed by signal 9 (SIGKILL)", "exited with code 1"."""
    if status is None:
        return "ended (exit status unknown)"
    if status & 0x7F:
        return describe_signal(status & 0x7F)
    return f"exited with code {(status >> 8) & 0xFF}"


def describe_signal(number: int) -> str:
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = "unknown signal"
    return f"killed by signal {number} ({name})"


def describe_returncode(returncode: Optional[int]) -> str:
    """Human words for a `subprocess` return code (negative: the signal that killed it)."""
    if returncode is None:
        return "ended (exit status unknown)"
    if returncode < 0:
        return describe_signal(-returncode)
    return f"exited with code {returncode}"


# Lines a dying C++ program (tritonserver and its backends) prints about why: the C++ runtime's
# message for an exception nothing caught, and what the kernel's default action or the C
# library says for a fatal signal.
_LAST_WORDS = ("terminate called", "what():", "Signal (", "Segmentation fault", "Aborted", "core dumped")
# Known causes, by a phrase of the dying words: what a user can do about them.
_KNOWN_CAUSES = {
    "boost::interprocess::lock_exception": (
        "This is a known fault of Triton 2.51's Python backend: a stub process died (a crash, "
        "kill -9, the OOM killer) while it held a lock of a message queue it shares with "
        "tritonserver, and tritonserver aborted when it next took that lock. The models are gone "
        "with the server; start it again (under Docker or Kubernetes, let the orchestrator "
        "restart the container), and look for why the stub died."
    ),
}


def dying_words(lines: Sequence[str], most: int = 6) -> List[str]:
    """The lines of a dead server's output that say why it died (at most `most`, the last ones).

    Stubs orphaned by the server may go on printing after it is gone, so these lines are not
    always among the last few of the output; an error message names them apart.
    """
    return [line for line in lines if any(words in line for words in _LAST_WORDS)][-most:]


def known_cause(lines: Sequence[str]) -> Optional[str]:
    """What is known about a server that died with these `dying_words`, or None."""
    for phrase, explanation in _KNOWN_CAUSES.items():
        if any(phrase in line for line in lines):
            return explanation
    return None
