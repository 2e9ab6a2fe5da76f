"""The fault harness's view of a serving script's processes (harness/faults_script.py), without
a server: a child that ends while the harness looks at it must not break the round.

CI once failed a PID 1 round with ``IndexError`` because `tritonserver()` read a child's command
line twice and the child (a short-lived helper of the script) ended between the two reads."""

from __future__ import annotations

import pathlib
import sys
from typing import List

import psutil

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "harness"))

import faults_script  # noqa: E402


class _Root:
    def __init__(self, children: List[psutil.Process]) -> None:
        self._children = children

    def children(self) -> List[psutil.Process]:
        return self._children


class _Script:
    """What `ServingScript.tritonserver` reads of its script: the root and the server id."""

    server_id = None

    def __init__(self, children: List[psutil.Process]) -> None:
        self._root = _Root(children)

    def root(self) -> _Root:
        return self._root


def test_a_child_that_ends_between_reads_is_not_taken_for_the_server(monkeypatch):
    reads = iter([["/opt/pytriton/tritonserver/bin/tritonserver", "--id=x"]] + [[]] * 5)
    monkeypatch.setattr(faults_script, "_cmdline", lambda process: next(reads))
    monkeypatch.setattr(faults_script, "_alive", lambda process: False)
    # The first read names tritonserver; the process is gone by the liveness check: no server.
    assert faults_script.ServingScript.tritonserver(_Script([psutil.Process()])) is None


def test_the_server_is_found_from_one_read_of_its_command_line(monkeypatch):
    argv = ["/opt/pytriton/tritonserver/bin/tritonserver",
            "--backend-config=python,shm-region-prefix-name=pytriton-123-abc9-tpb"]
    reads = iter([argv] + [[]] * 5)
    monkeypatch.setattr(faults_script, "_cmdline", lambda process: next(reads))
    monkeypatch.setattr(faults_script, "_alive", lambda process: True)
    me = psutil.Process()
    script = _Script([me])
    # Later reads return nothing (the process ended); the server and its id come from the first.
    assert faults_script.ServingScript.tritonserver(script) is me
    assert script.server_id == "pytriton-123-abc9"
