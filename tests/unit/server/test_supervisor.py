"""pytriton.server.supervisor: the restart budget, and reading how a process ended."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from pytriton.exit_status import (
    describe_returncode,
    describe_stub_death,
    describe_wait_status,
    dying_words,
    known_cause,
    read_exit_status,
    read_fault_trace,
)
from pytriton.server.supervisor import RestartBudget, reap_adopted


def test_the_budget_allows_max_restarts_within_the_window_then_refuses():
    budget = RestartBudget(max_restarts=2, window_s=60)
    assert budget.allow(0.0) and budget.allow(10.0)
    assert not budget.allow(20.0)  # a third within 60 s
    assert budget.allow(61.0)  # the first one left the window
    assert budget.total == 3


def test_a_budget_of_zero_never_restarts():
    assert not RestartBudget(max_restarts=0, window_s=60).allow(0.0)


@pytest.mark.parametrize("status, words", [
    (signal.SIGKILL, "killed by signal 9 (SIGKILL)"),
    (signal.SIGSEGV | 0x80, "killed by signal 11 (SIGSEGV)"),  # with the core-dump bit
    (3 << 8, "exited with code 3"),
    (None, "exit status unknown"),
])
def test_wait_status_in_words(status, words):
    assert words in describe_wait_status(status)


def test_returncode_in_words():
    assert describe_returncode(-9) == "killed by signal 9 (SIGKILL)"
    assert describe_returncode(2) == "exited with code 2"


def test_the_exit_status_of_a_zombie_is_read_from_proc():
    child = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"])
    try:
        deadline = time.monotonic() + 10
        status = None
        while status is None and time.monotonic() < deadline:  # a zombie until waited for
            status = read_exit_status(child.pid)
            time.sleep(0.02)
        assert status is not None and status & 0x7F == signal.SIGSEGV
    finally:
        child.wait()
    assert read_exit_status(child.pid) is None  # reaped: nothing to read


def test_reaping_adopted_children_is_only_for_pid_1():
    if os.getpid() == 1:
        pytest.skip("this test process is PID 1")
    assert reap_adopted() == []


_PID1_REAP = """
import json, os, signal, time
from pytriton import children
from pytriton.server.supervisor import reap_adopted
assert os.getpid() == 1
def fork(keep):
    with children.LOCK:
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        if keep:
            children.keep(pid)
    os.kill(pid, signal.SIGKILL)
    return pid
kept, stranger = fork(True), fork(False)
time.sleep(0.5)  # both zombies by now
reaped = reap_adopted()
_, status = os.waitpid(kept, 0)
children.release(kept)
print(json.dumps({"reaped": reaped, "kept": kept, "stranger": stranger, "signal": os.WTERMSIG(status)}))
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare for a PID namespace"
)
def test_as_pid_1_the_reaper_leaves_a_process_instance_to_its_parent():
    # The parent of a process instance tells its requests how the worker ended: the PID 1 reaper must
    # not take that exit status (it read "exit status unknown" under load).
    result = subprocess.run(
        ["unshare", "-p", "-f", "--mount-proc", sys.executable, "-c", _PID1_REAP],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["reaped"] == [found["stranger"]]
    assert found["signal"] == signal.SIGKILL


def test_a_fault_trace_tells_the_signal_that_a_reaped_process_died_of(tmp_path):
    trace = tmp_path / "stub-1.fault"
    code = (
        "import faulthandler, os, signal, sys\n"
        f"faulthandler.enable(file=open({str(trace)!r}, 'w'))\n"
        "os.kill(os.getpid(), signal.SIGSEGV)\n"
    )
    child = subprocess.run([sys.executable, "-c", code], capture_output=True)
    assert child.returncode == -signal.SIGSEGV
    status = read_fault_trace(str(trace))
    assert status == signal.SIGSEGV
    assert describe_stub_death(status, traced=True) == "killed by signal 11 (SIGSEGV)"


def test_a_traced_stub_gone_without_a_word_was_killed_by_sigkill(tmp_path):
    trace = tmp_path / "stub-2.fault"
    trace.write_text("")  # what a live stub's trace holds, and a SIGKILLed one's
    assert read_fault_trace(str(trace)) is None
    assert "SIGKILL" in describe_stub_death(None, traced=True) and "OOM killer" in describe_stub_death(None, True)
    assert describe_stub_death(None, traced=False) == "ended (exit status unknown)"
    assert read_fault_trace(str(tmp_path / "missing.fault")) is None and read_fault_trace(None) is None


# What tritonserver 2.51 printed when its Python backend aborted after a stub died holding a
# message-queue lock (seen in the fault matrix), with the lines its orphaned stubs printed after.
_ABORTED_OUTPUT = [
    "I1127 20:31:02.114 1234 python_be.cc:2100] TRITONBACKEND_ModelInstanceFinalize: delete instance state",
    "terminate called after throwing an instance of 'boost::interprocess::lock_exception'",
    "  what():  boost::interprocess::lock_exception",
    "Signal (6) received.",
    " 0# 0x000055D0C0A1B2C3 in tritonserver",
] + [f"stub line {n}: the parent process is gone" for n in range(30)]


def test_the_dying_words_are_found_even_when_orphaned_stubs_printed_more_after_them():
    words = dying_words(_ABORTED_OUTPUT)
    assert words == _ABORTED_OUTPUT[1:4]
    assert all(line not in "\n".join(_ABORTED_OUTPUT[-20:]) for line in words), "the sample must hide them from a tail"


def test_a_known_fatal_exception_gets_its_explanation_and_an_unknown_one_none():
    cause = known_cause(dying_words(_ABORTED_OUTPUT))
    assert cause is not None and "stub process died" in cause and "restart" in cause
    assert known_cause(["terminate called after throwing an instance of 'std::bad_alloc'"]) is None
    assert dying_words(["I1127 model loaded", "I1127 serving"]) == []


def test_dying_words_keeps_the_last_ones():
    lines = [f"Signal (11) received. {n}" for n in range(10)]
    assert dying_words(lines, most=3) == lines[-3:]
