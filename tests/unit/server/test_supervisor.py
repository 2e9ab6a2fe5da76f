"""pytriton.server.supervisor: the restart budget, and reading how a process ended."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from pytriton.exit_status import (
    describe_returncode,
    describe_stub_death,
    describe_wait_status,
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
