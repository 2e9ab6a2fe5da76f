"""Fault matrix: kill the parts of a serving `Triton` under load and check what is left.

Each round starts ``harness/serve.py`` (``Triton.serve()`` serving ``echo``, ``stream`` and
``text``; the "user process") on free ports on 127.0.0.1, puts load on it (`faults_load`: echo
over HTTP and gRPC, text over gRPC, one decoupled stream after another over gRPC; each lane
must have a right answer before the fault), then applies one fault, the rounds cycling through:

* ``kill_user``: SIGKILL the user process. Expected: exit -9; tritonserver (told by
  ``PR_SET_PDEATHSIG``) and the stubs end; the /dev/shm entries stay until the next start's sweep.
* ``kill_server``: SIGKILL tritonserver. Expected: ``serve()`` raises ``PyTritonServerCrashedError``
  naming SIGKILL, the script exits non-zero within 20 s, its stubs are killed, nothing is left.
* ``kill_stub`` / ``segv_stub``: SIGKILL / SIGSEGV one model's stub (the model rotates over the
  rounds). Expected: the model heals: it answers ready again and every lane gets a right answer
  within 10 s of the signal; then SIGTERM: exit 0, nothing left.
* ``term_under_load``: SIGTERM the user process under load. Expected: it drains, exits 0, nothing left.
* ``term_during_load``: SIGTERM the user process once its tritonserver runs and a stub is up but
  before its models report ready (the lanes are already trying). Expected: it ends within 30 s;
  exit 0 or 143 (inside `with Triton()` pytriton cleans up, then SIGTERM ends the script with
  `SystemExit(143)`, PID 1 or not), nothing left.

When each check happens (the legend printed with the table repeats it):

* outcome: the exit code of the user process (for PID 1, as its launcher saw it).
* procs: once the script exited, the processes whose command line carries the round's server id,
  plus the script and its launcher, must all be gone within 30 s.
* zombies: sampled about every 50 ms while the script runs (at ready, under load, during the
  fault, the heal and the exit); a zombie under the script that is still there 2 s after it was
  first seen fails the round.
* shm end: the round's /dev/shm entries and bytes once its processes are gone: 0 unless the user
  process died by a signal it could not handle (then its lease is free and the sweep must act).
* after next start: at the next start (the next round's, or the final start+stop after the last
  round), once its sweep ran (the sweep runs in the first ``bind()``, before tritonserver starts;
  it is checked once that server is ready, or for ``term_during_load`` once its tritonserver is
  up): the round's entries and temporary folders must be gone, and /dev/shm (entries of the
  matrix's earlier servers and every entry that is no pytriton server's) must be back at the
  baseline measured before round 1 (+0 entries, +0 bytes). Other pytriton servers on the host
  are left out of the count.
* next start: the first later start whose lanes all got a right answer.

With ``--pid1-rounds`` the matrix runs again with the user process as PID 1 of its own PID
namespace (``faults_pid1.py``, as ``unshare -p -f --mount-proc`` does; root only, skipped with
a message elsewhere). A final ordinary start+stop sweeps the last round. Exit status 1 when any
check fails. ``--plant no_sweep,no_heal`` disables the sweep or the healing in the user process
(through a generated ``sitecustomize``), to show that the checks notice.

Usage: ``python harness/faults.py [--rounds 20] [--pid1-rounds 20] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Set

import psutil
from common import MODELS, log, served_backend, table
from faults_load import InFlight, Load
from faults_script import (
    PLANTS,
    ServingScript,
    can_run_as_pid1,
    describe,
    processes_of,
    shm_all,
    shm_entries,
    shm_names_used,
    shm_of_matrix,
    tmp_folders,
)

FAULTS = ("kill_user", "kill_server", "kill_stub", "segv_stub", "kill_worker", "segv_worker", "term_under_load",
          "term_during_load")
BACKEND_FAULTS = ("kill_user", "kill_server", "kill_worker", "segv_worker", "term_under_load", "term_during_load")
"""The default on pytriton's backend, which runs no stub to kill."""
WORKER_ANSWER_S = 1.0  # a request in flight on a killed worker process is answered within
READY_TIMEOUT_S = 120.0
WARM_TIMEOUT_S = 20.0  # every lane served before the fault
HEAL_LIMIT_S = 10.0
DOWN_WINDOW_S = 2.0  # a dead stub's model turns not ready within this
KILL_EXIT_S = 10.0
CRASH_EXIT_S = 20.0
STOP_EXIT_S = 40.0  # SIGTERM -> exit: serve.py's drain (exit_timeout_secs=10), the server's stop, margin
TERM_AT_LOAD_EXIT_S = 30.0
GONE_TIMEOUT_S = 30.0
ZOMBIE_GRACE_S = 2.0
POLL_S = 0.05


@dataclasses.dataclass
class Round:
    number: int
    fault: str
    pid1: bool
    target: str = ""  # the model whose stub is signalled
    server_id: str = ""
    outcome: str = ""
    exit_code: Optional[int] = None
    healed_s: Optional[float] = None
    ready_s: Optional[float] = None
    exit_s: Optional[float] = None  # from the fault (or the SIGTERM after a heal) to the exit
    procs_left: List[str] = dataclasses.field(default_factory=list)
    gone_s: Optional[float] = None
    zombies_seen: int = 0
    zombies_kept: List[str] = dataclasses.field(default_factory=list)
    leaves_for_sweep: bool = False
    triton_abort: bool = False  # tritonserver died of Triton 2.51's known lock_exception (see _stub_fault)
    shm_end: Dict[str, int] = dataclasses.field(default_factory=dict)
    tmp_end: List[str] = dataclasses.field(default_factory=list)
    swept_at: str = ""
    swept_by: str = ""  # whose sweep removed the round's pending entries (the next start logs them)
    shm_swept: Optional[Dict[str, int]] = None
    tmp_swept: List[str] = dataclasses.field(default_factory=list)
    matrix_shm: Optional[Dict[str, int]] = None  # the matrix's entries at the next start, after its sweep
    host_delta: Optional[Dict[str, int]] = None  # all of /dev/shm against the host's baseline (informative)
    next_ok: str = ""
    seconds: float = 0.0
    load: Dict[str, Any] = dataclasses.field(default_factory=dict)
    notes: List[str] = dataclasses.field(default_factory=list)
    log_tail: str = ""
    failures: List[str] = dataclasses.field(default_factory=list)

    @property
    def label(self) -> str:
        return f"r{self.number}" if self.number else "final"

    def fail(self, message: str) -> None:
        log(f"  {self.label} FAIL: {message}")
        self.failures.append(message)


def exit_words(code: Optional[int]) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"{code} ({signal.Signals(-code).name})"
        except ValueError:
            return str(code)
    return str(code)


class ZombieWatch:
    """Zombies under the script: counted when seen, failed when one outlives `ZOMBIE_GRACE_S`."""

    def __init__(self, script: ServingScript, round_: Round) -> None:
        self._script = script
        self._round = round_
        self._first_seen: Dict[str, float] = {}
        self._last_seen: Dict[str, float] = {}
        self._failed: Set[str] = set()

    def sample(self, where: str) -> None:
        now = time.monotonic()
        for zombie in self._script.zombies():
            first = self._first_seen.setdefault(zombie, now)
            self._last_seen[zombie] = now
            if first == now:
                self._round.zombies_seen += 1
            elif now - first > ZOMBIE_GRACE_S and zombie not in self._failed:
                self._failed.add(zombie)
                self._round.fail(f"zombie {zombie} under the script for over {ZOMBIE_GRACE_S:.0f} s ({where})")

    def kept(self) -> List[str]:
        """The zombies that outlived the grace, with how long they were seen."""
        return [f"{zombie}: seen {self._last_seen[zombie] - self._first_seen[zombie]:.1f} s"
                for zombie in sorted(self._failed)]


class Matrix:
    """Runs the rounds, and checks each round's leftovers at the next start (see the module doc)."""

    def __init__(self, heal_limit_s: float = HEAL_LIMIT_S, term_at_load_exit_s: float = TERM_AT_LOAD_EXIT_S,
                 plant: Sequence[str] = (), native: bool = True) -> None:
        self.plant = plant
        self.native = native
        self.heal_limit_s = heal_limit_s
        self.term_at_load_exit_s = term_at_load_exit_s
        self.rounds: List[Round] = []
        self.own_ids: List[str] = []
        self.host_baseline = shm_all()
        self.used: Set[str] = set()  # entries without a server prefix that processes of the matrix used
        self.baseline = shm_of_matrix([], self.used)  # before round 1: none of its servers exists yet
        self._awaiting_sweep: List[Round] = []
        self._awaiting_serve: List[Round] = []

    # -- waiting, with the zombie watch running ------------------------------------------------------

    @staticmethod
    def wait(condition: Callable[[], bool], timeout_s: float, zombies: ZombieWatch, where: str) -> Optional[float]:
        """Seconds until `condition` held, None when `timeout_s` passed first."""
        start = time.monotonic()
        while True:
            zombies.sample(where)
            if condition():
                return time.monotonic() - start
            if time.monotonic() - start > timeout_s:
                return None
            time.sleep(POLL_S)

    def wait_exit(self, script: ServingScript, round_: Round, timeout_s: float, zombies: ZombieWatch,
                  where: str) -> Optional[int]:
        """The script's exit code once it ended within `timeout_s` (None: it did not); sets `exit_s`."""
        waited = self.wait(lambda: not script.is_running(), timeout_s, zombies, where)
        if waited is None:
            return None
        round_.exit_s = waited
        return script.wait_exit(5.0)

    def observe(self, script: ServingScript) -> None:
        """Note the /dev/shm entries without a server prefix that the script's processes use."""
        root = script.root()
        processes = [*([root] if root is not None else []), *script.descendants()]
        self.used.update(name for name in shm_names_used(processes)
                         if not name.startswith("pytriton-") and name not in self.host_baseline)

    # -- one round ------------------------------------------------------------------------------------

    def run_round(self, number: int, fault: str, pid1: bool, target: str = "") -> Round:
        round_ = Round(number=number, fault=fault, pid1=pid1, target=target)
        log(f"{round_.label}: {fault}{' ' + target if target else ''}{' as PID 1' if pid1 else ''}")
        started = time.monotonic()
        script = ServingScript(pid1=pid1, plant=self.plant if number else ())
        zombies = ZombieWatch(script, round_)
        load = Load(script.http_url, script.grpc_url)
        try:
            if fault == "term_during_load":
                load.start()  # clients already knock while the models load
                self._term_during_load(script, round_, zombies)
            elif self._start(script, round_, zombies):
                load.start()
                if load.wait_all_served({}, WARM_TIMEOUT_S):
                    self._served(round_)
                else:
                    round_.fail(f"not every lane served within {WARM_TIMEOUT_S:.0f} s: {load.summary()}")
                zombies.sample("under load")
                self.observe(script)
                getattr(self, f"_{fault}")(script, round_, zombies, load)
        except Exception as error:  # noqa: BLE001 - a harness error fails the round, the matrix goes on
            round_.fail(f"harness error: {type(error).__name__}: {error}")
        finally:
            hung = load.stop()
            if hung:
                round_.fail(f"client lanes still blocked 15 s after the round: {hung}")
            round_.load = load.summary()
            wrong = {name: lane["wrong"] for name, lane in round_.load.items() if lane["wrong"]}
            if wrong:
                round_.fail(f"wrong answers (mixed up): {wrong}")
            for kind in load.undecodable_errors():
                round_.notes.append(f"a client got an error whose body it could not decode: {kind}")
            self._finish(script, round_, zombies)
            round_.zombies_kept = zombies.kept()
            round_.log_tail = script.log_tail(4000)
            script.close()
        round_.seconds = time.monotonic() - started
        self.rounds.append(round_)
        return round_

    def _start(self, script: ServingScript, round_: Round, zombies: ZombieWatch) -> bool:
        round_.ready_s = self.wait(script.models_ready, READY_TIMEOUT_S, zombies, "start")
        if round_.ready_s is None:
            round_.fail(f"not ready within {READY_TIMEOUT_S:.0f} s:\n{script.log_tail()}")
            return False
        self._started(script, round_)
        return True

    def _started(self, script: ServingScript, round_: Round) -> None:
        """This start's sweep ran: check what the earlier rounds left."""
        script.tritonserver()
        round_.server_id = script.server_id or ""
        if round_.server_id:
            self.own_ids.append(round_.server_id)
        matrix_shm = shm_of_matrix(self.own_ids, self.used, exclude=[round_.server_id])
        host = shm_all()
        host_delta = {"entries": len(host) - len(self.host_baseline),
                      "bytes": sum(host.values()) - sum(self.host_baseline.values())}
        output = script.log_tail(200_000)
        for earlier in self._awaiting_sweep:
            earlier.swept_at = round_.label
            if earlier.shm_end or earlier.tmp_end:
                # The sweep logs what it removed; another start on this host may have swept first.
                earlier.swept_by = round_.label if earlier.server_id in output else "another process"
            earlier.shm_swept = shm_entries([earlier.server_id])
            earlier.tmp_swept = tmp_folders([earlier.server_id])
            earlier.matrix_shm = matrix_shm
            earlier.host_delta = host_delta
            if earlier.shm_swept or earlier.tmp_swept:
                earlier.fail(f"left after the sweep of {round_.label}'s start: {sorted(earlier.shm_swept)[:5]} "
                             f"{earlier.tmp_swept[:3]}")
            if matrix_shm != self.baseline:
                earlier.fail(f"/dev/shm entries of the matrix at {round_.label}'s start, after its sweep: "
                             f"{len(matrix_shm)} entries, {sum(matrix_shm.values())} B (baseline "
                             f"{len(self.baseline)}, {sum(self.baseline.values())} B): {sorted(matrix_shm)[:5]}")
        self._awaiting_sweep = []

    def _served(self, round_: Round) -> None:
        for earlier in self._awaiting_serve:
            earlier.next_ok = round_.label
        self._awaiting_serve = []

    def _sigterm(self, script: ServingScript, round_: Round, zombies: ZombieWatch, where: str) -> None:
        """SIGTERM the user process; exit 0 within `STOP_EXIT_S` expected."""
        root = script.root()
        if root is not None and script.is_running():
            root.send_signal(signal.SIGTERM)
        round_.exit_code = self.wait_exit(script, round_, STOP_EXIT_S, zombies, where)
        if round_.exit_code != 0:
            round_.fail(f"SIGTERM ({where}): expected exit 0 within {STOP_EXIT_S:.0f} s, got "
                        f"{exit_words(round_.exit_code)}")

    # -- the faults ---------------------------------------------------------------------------------

    def _kill_user(self, script: ServingScript, round_: Round, zombies: ZombieWatch, load: Load) -> None:
        root = script.root()
        assert root is not None
        root.kill()
        round_.exit_code = self.wait_exit(script, round_, KILL_EXIT_S, zombies, "after SIGKILL")
        round_.outcome = f"exit {exit_words(round_.exit_code)}"
        round_.leaves_for_sweep = True
        if round_.exit_code != -signal.SIGKILL:
            round_.fail(f"expected exit -9 (SIGKILL), got {exit_words(round_.exit_code)}")

    def _kill_server(self, script: ServingScript, round_: Round, zombies: ZombieWatch, load: Load) -> None:
        server = script.tritonserver()
        assert server is not None
        server.kill()
        round_.exit_code = self.wait_exit(script, round_, CRASH_EXIT_S, zombies, "after the server's death")
        output = script.log_tail(20000)
        reported = "PyTritonServerCrashedError" in output and "signal 9 (SIGKILL)" in output
        round_.outcome = f"exit {exit_words(round_.exit_code)}" + (", crash reported" if reported else "")
        if round_.exit_code in (None, 0):
            round_.fail(f"a dead tritonserver must end serve() with a non-zero exit within {CRASH_EXIT_S:.0f} s; "
                        f"got {exit_words(round_.exit_code)}")
        if not reported:
            round_.fail(f"no PyTritonServerCrashedError naming SIGKILL in the script's output:\n{script.log_tail()}")

    def _kill_stub(self, script: ServingScript, round_: Round, zombies: ZombieWatch, load: Load) -> None:
        self._stub_fault(script, round_, zombies, load, signal.SIGKILL)

    def _segv_stub(self, script: ServingScript, round_: Round, zombies: ZombieWatch, load: Load) -> None:
        self._stub_fault(script, round_, zombies, load, signal.SIGSEGV)

    def _stub_fault(self, script: ServingScript, round_: Round, zombies: ZombieWatch, load: Load,
                    signum: int) -> None:
        model = round_.target
        victims = script.stubs().get(model, [])
        if not victims:
            round_.fail(f"no stub of model {model} found")
            return
        victim = victims[0]
        victim.send_signal(signum)
        signalled = time.monotonic()

        def left() -> float:
            return max(0.0, self.heal_limit_s - (time.monotonic() - signalled))

        if self.wait(lambda: not script.model_ready(model), DOWN_WINDOW_S, zombies, "stub dead") is None:
            round_.notes.append(f"{model} never seen not ready")
        self.wait(lambda: script.model_ready(model) or not script.is_running(), left(), zombies, "healing")
        at_ready = load.oks()
        served = self.wait(lambda: all(load.oks()[name] > count for name, count in at_ready.items())
                           or not script.is_running(), left(), zombies, "healing")
        healed = served is not None and script.is_running() and script.model_ready(model)
        round_.healed_s = time.monotonic() - signalled if healed else None
        if not healed and self._known_triton_abort(script, round_, zombies):
            return
        if not healed:
            round_.fail(f"model {model} did not serve again within {self.heal_limit_s:.0f} s of "
                        f"{signal.Signals(signum).name} to its stub (script running: {script.is_running()}, "
                        f"model ready again: {script.is_running() and script.model_ready(model)}, "
                        f"load {load.summary()})")
        elif victim.pid in [stub.pid for stub in script.stubs().get(model, [])]:
            round_.fail(f"the signalled stub {victim.pid} still serves {model}")
        zombies.sample("healed")
        self.observe(script)
        self._quiet(load)
        self._sigterm(script, round_, zombies, "after the heal")
        healed_words = f"healed {round_.healed_s:.1f} s" if round_.healed_s is not None else "NOT healed"
        round_.outcome = f"{healed_words}; SIGTERM: exit {exit_words(round_.exit_code)}"

    def _kill_worker(self, script: ServingScript, round_: Round, zombies: ZombieWatch, load: Load) -> None:
        self._worker_fault(script, round_, zombies, load, signal.SIGKILL)

    def _segv_worker(self, script: ServingScript, round_: Round, zombies: ZombieWatch, load: Load) -> None:
        self._worker_fault(script, round_, zombies, load, signal.SIGSEGV)

    def _worker_fault(self, script: ServingScript, round_: Round, zombies: ZombieWatch, load: Load,
                      signum: int) -> None:
        """Signal the worker processes of ``slow`` and ``slow_stream`` while requests and streams
        are in flight on them, over both protocols. Expected: every one of them is answered
        within `WORKER_ANSWER_S` with an error naming the signal; fresh workers serve again within
        the heal limit; then SIGTERM: exit 0, nothing left."""
        in_flight = InFlight(script.http_url, script.grpc_url)
        victims = {in_flight.worker_pid()}
        in_flight.start()
        for _ in range(2):  # one stream per protocol
            in_flight.streams_started.acquire(timeout=10.0)
        victims.update(in_flight.stream_pids)
        time.sleep(0.5)  # the plain requests are in their worker's batch by now
        targets = {pid: script.host_pid(pid) for pid in victims}
        signalled = time.monotonic()
        for pid, target in targets.items():
            if target is None:
                round_.fail(f"worker process {pid} not found among the script's processes (not signalled)")
                continue
            try:
                os.kill(target, signum)
            except ProcessLookupError:
                round_.fail(f"worker process {pid} was gone before the signal")
        in_flight.wait(30.0)
        name = signal.Signals(signum).name
        expected = f"killed by signal {int(signum)} ({name}) while serving this request"
        slowest, failed = 0.0, 0
        for request, (seen, at) in sorted(in_flight.results.items()):
            if seen.startswith("answered by pid "):  # queued in Triton behind the batch: the fresh worker's
                if int(seen.rsplit(" ", 1)[1]) in victims and at > signalled:
                    round_.fail(f"{request}: answered by the signalled worker process: {seen}")
                elif at <= signalled:  # a loaded machine took longer than SLOW_S to start them all
                    round_.notes.append(f"{request} was answered before the signal")
                continue
            failed += 1
            slowest = max(slowest, at - signalled)
            if expected not in seen:
                round_.fail(f"{request}: expected an error saying the worker was {expected[:-26]}, got {seen[:300]}")
            elif at - signalled > WORKER_ANSWER_S:
                round_.fail(f"{request}: answered {at - signalled:.2f} s after the signal (limit {WORKER_ANSWER_S} s)")
        if len(in_flight.results) != 6 or failed < 3:  # a plain request per model and the two streams at least
            round_.fail(f"expected 6 requests ended, 3 or more with the error; got {in_flight.results}")

        def serves_again() -> bool:
            try:
                fresh = in_flight.worker_pid()
            except Exception:  # noqa: BLE001 - not yet
                return False
            return fresh not in victims

        healed = self.wait(serves_again, self.heal_limit_s, zombies, "healing")
        round_.healed_s = healed
        if healed is None:
            round_.fail(f"slow did not serve again from a fresh worker within {self.heal_limit_s:.0f} s")
        self.observe(script)
        self._quiet(load)
        self._sigterm(script, round_, zombies, "after the heal")
        healed_words = f"answered <= {slowest:.2f} s, healed {healed:.1f} s" if healed is not None else "NOT healed"
        round_.outcome = f"{healed_words}; SIGTERM: exit {exit_words(round_.exit_code)}"

    def _known_triton_abort(self, script: ServingScript, round_: Round, zombies: ZombieWatch) -> bool:
        """Whether tritonserver aborted of the Triton 2.51 fault pytriton cannot prevent, and said so.

        A stub that dies while it holds a lock of a message queue it shares with tritonserver
        leaves the server's next lock throwing ``boost::interprocess::lock_exception``, which
        nothing in Triton's Python backend catches: the server aborts (about 2 % of the
        ``segv_stub`` rounds on ``stream``). What pytriton owes the user then is a loud exit
        that names the cause, and nothing left behind (the later columns check that).
        """
        if script.is_running() and script.tritonserver() is not None:
            return False
        round_.exit_code = self.wait_exit(script, round_, CRASH_EXIT_S, zombies, "after the server's abort")
        output = script.log_tail(20000)
        if "PyTritonServerCrashedError" not in output or "boost::interprocess::lock_exception" not in output:
            return False
        round_.triton_abort = True
        round_.outcome = f"Triton aborted (known 2.51 fault), crash reported; exit {exit_words(round_.exit_code)}"
        round_.notes.append("tritonserver aborted: boost::interprocess::lock_exception after the stub's death")
        if round_.exit_code in (None, 0):
            round_.fail(f"the server aborted, yet the user process did not exit non-zero: "
                        f"{exit_words(round_.exit_code)}")
        return True

    def _term_under_load(self, script: ServingScript, round_: Round, zombies: ZombieWatch, load: Load) -> None:
        self._sigterm(script, round_, zombies, "under load")
        round_.outcome = f"exit {exit_words(round_.exit_code)}"

    @staticmethod
    def _quiet(load: Load) -> None:
        """Stop the clients before a SIGTERM that is no fault of its own, so that the stop measures
        the library's drain: tritonserver waits out its whole exit timeout for an HTTP connection
        that closes just as the signal comes, and about 1 s after the close it no longer counts."""
        load.stop()
        time.sleep(1.0)

    def _final(self, script: ServingScript, round_: Round, zombies: ZombieWatch, load: Load) -> None:
        self._quiet(load)
        self._sigterm(script, round_, zombies, "final stop")
        round_.outcome = f"exit {exit_words(round_.exit_code)}"

    def _term_during_load(self, script: ServingScript, round_: Round, zombies: ZombieWatch) -> None:
        def loading() -> bool:  # a stub runs (the proxy path), or the server does (pytriton's backend has none)
            return bool(script.stubs()) or (self.native and script.tritonserver() is not None) or \
                not script.is_running()

        if self.wait(loading, READY_TIMEOUT_S, zombies, "start") is None or not script.is_running():
            round_.fail(f"no stub started within {READY_TIMEOUT_S:.0f} s:\n{script.log_tail()}")
            return
        self._started(script, round_)
        ready = [model for model in MODELS if script.model_ready(model)]
        stubs = sum(len(found) for found in script.stubs().values())
        self.observe(script)
        script.root().send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        phase = f"at {stubs}/{len(MODELS)} stubs, {len(ready)} ready"
        if len(ready) == len(MODELS):
            round_.notes.append("every model was ready already when SIGTERM was sent")
        limit = self.term_at_load_exit_s
        round_.exit_code = self.wait_exit(script, round_, limit, zombies, "SIGTERM during load")
        if round_.exit_code is None:
            serving = script.models_ready()
            round_.outcome = f"HANG {phase}: runs {limit:.0f} s on, serving: {serving}"
            round_.fail(f"SIGTERM during model load ({phase}) did not end the user process within {limit:.0f} s "
                        f"(it serves: {serving}); killed it")
            script.kill_all()
            round_.leaves_for_sweep = True
            return
        round_.outcome = f"exit {exit_words(round_.exit_code)} {phase}"
        # The models load in bind() inside `with Triton()` (the default policy): pytriton stops and
        # cleans up, then SIGTERM ends the script with SystemExit(143), as PID 1 too.
        if round_.exit_code not in (0, 128 + signal.SIGTERM):
            round_.fail(f"SIGTERM during model load: expected exit 0 or 143, got {exit_words(round_.exit_code)}")

    # -- after the round ------------------------------------------------------------------------------

    def _finish(self, script: ServingScript, round_: Round, zombies: ZombieWatch) -> None:
        if script.is_running():
            round_.fail(f"the script still ran at the end of the round; killed it:\n{script.log_tail()}")
            script.kill_all()
            round_.leaves_for_sweep = True
        script.wait_exit(10.0)
        ids, pids = [script.server_id or ""], script.own_pids()
        round_.gone_s = self.wait(lambda: not processes_of(ids, pids), GONE_TIMEOUT_S, zombies, "after the exit")
        left = processes_of(ids, pids)
        round_.procs_left = [describe(process) for process in left]
        if left:
            round_.fail(f"processes left {GONE_TIMEOUT_S:.0f} s after the exit: {round_.procs_left}; killed them")
            for process in left:
                try:
                    process.kill()
                except psutil.Error:
                    pass
        round_.server_id = round_.server_id or script.server_id or ""
        round_.shm_end = shm_entries(ids)
        round_.shm_end.update(shm_of_matrix([], self.used))
        round_.tmp_end = tmp_folders(ids)
        if (round_.shm_end or round_.tmp_end) and not round_.leaves_for_sweep:
            round_.fail(f"left after a clean exit ({exit_words(round_.exit_code)}): {sorted(round_.shm_end)[:5]} "
                        f"{round_.tmp_end[:3]}")
        self._awaiting_sweep.append(round_)
        self._awaiting_serve.append(round_)

    def final(self) -> Round:
        """A last ordinary start+stop: its sweep removes what the last round left; then nothing of
        any round may be left, and the matrix's /dev/shm entries must be at their baseline."""
        round_ = self.run_round(0, "final", pid1=False)
        self.rounds.remove(round_)
        for earlier in [r for r in self._awaiting_serve if r is not round_]:
            earlier.fail("no later start served")
        left = [describe(p) for p in processes_of(self.own_ids)]
        round_.procs_left += left
        round_.swept_at = "end"
        round_.shm_swept = {}
        round_.matrix_shm = shm_of_matrix(self.own_ids, self.used)
        host = shm_all()
        round_.host_delta = {"entries": len(host) - len(self.host_baseline),
                             "bytes": sum(host.values()) - sum(self.host_baseline.values())}
        if left or round_.matrix_shm != self.baseline:
            round_.fail(f"after the final stop: processes {left}, entries of the matrix {sorted(round_.matrix_shm)}")
        return round_


def shm_cell(entries: Optional[Dict[str, int]]) -> str:
    if entries is None:
        return "-"
    return f"{len(entries)}/{sum(entries.values())} B"


def row(round_: Round) -> List[str]:
    outcome = round_.outcome + (f" [{round_.exit_s:.1f} s]" if round_.exit_s is not None else "")
    procs = "0" if not round_.procs_left else f"{len(round_.procs_left)}: {', '.join(round_.procs_left)[:40]}"
    if round_.gone_s is not None and not round_.procs_left:
        procs += f" ({round_.gone_s:.1f} s)"
    zombies = f"{len(round_.zombies_kept)} kept" if round_.zombies_kept else "0"
    if round_.zombies_seen and not round_.zombies_kept:
        zombies += f" ({round_.zombies_seen} seen)"
    end = shm_cell(round_.shm_end) + (" pending" if round_.shm_end else "")
    swept = "-"
    if round_.shm_swept is not None:
        swept = f"{shm_cell(round_.shm_swept)} at {round_.swept_at}; matrix {shm_cell(round_.matrix_shm)}"
        if round_.swept_by:
            swept += f"; swept by {round_.swept_by}"
    fault = round_.fault + (f" {round_.target}" if round_.target else "")
    verdict = "ok" if not round_.failures else "FAIL"
    return [round_.label, fault, "yes" if round_.pid1 else "no", outcome, procs, zombies, end, swept,
            round_.next_ok or "-", f"{round_.seconds:.1f}", verdict]


HEADERS = ["round", "fault", "PID 1", "user sees [s to exit]", "procs left", "zombies", "shm at end",
           "after next start's sweep", "next start ok", "s", "verdict"]
LEGEND = """\
user sees: the exit code of the user process (negative: the signal; as PID 1, as its launcher saw it), and in
  brackets the seconds from the fault (for a stub fault: from the SIGTERM after the heal) to the exit. For a stub
  fault, first the seconds from the signal until the model was ready again and every lane had a right answer.
procs left: once the script exited, live processes carrying the round's server id, the script and its launcher
  (in brackets: seconds until they were all gone; at most 30 s is waited).
zombies: sampled every ~50 ms while the script ran (start, under load, the fault, the heal, the exit); "kept": still
  a zombie 2 s after it was first seen (fails); "seen": zombies that were reaped within 2 s.
shm at end: the round's /dev/shm entries/bytes once its processes were gone ("pending": left for the next start's
  sweep, allowed only when the user process died by a signal it could not handle).
after next start's sweep: checked at the start named (the next round's; "final": a last ordinary start+stop) once
  its sweep had run (the sweep runs in its first bind(), before its tritonserver starts; checked when that server
  is ready, or for term_during_load once its tritonserver is up): the round's entries/bytes, then all the entries
  of the matrix's earlier servers (and entries without a server prefix its processes used) against the baseline
  measured before round 1. "swept by": whose sweep removed the round's pending entries: the start named when its
  log lists them, "another process" when another start on this host swept first (every start sweeps all dead
  servers' leftovers).
next start ok: the first later start whose four lanes all got a right answer."""


def schedule(rounds: int, faults: Sequence[str], first: int, pid1: bool) -> List[tuple]:
    plan = []
    for index in range(rounds):
        fault = faults[index % len(faults)]
        cycle = index // len(faults)
        target = ""
        if fault == "kill_stub":
            target = MODELS[cycle % len(MODELS)]
        elif fault == "segv_stub":
            target = MODELS[(cycle + 1) % len(MODELS)]
        plan.append((first + index, fault, pid1, target))
    return plan


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="rounds with the user process as an ordinary child")
    parser.add_argument("--pid1-rounds", type=int, default=None,
                        help="rounds with the user process as PID 1 (default: as many as --rounds; 0: none)")
    parser.add_argument("--faults", default="", help="faults to cycle through, in order (default: all those of "
                        "the backend that serves: no stub faults on pytriton's backend)")
    parser.add_argument("--model-backend", choices=["pytriton", "python"], default="",
                        help="TritonConfig.model_backend of the user process (default: the installation's)")
    parser.add_argument("--pid1-faults", default=None, help="faults of the PID 1 rounds (default: --faults)")
    parser.add_argument("--heal-limit-s", type=float, default=HEAL_LIMIT_S, help="a stub fault must heal within")
    parser.add_argument("--term-at-load-exit-s", type=float, default=TERM_AT_LOAD_EXIT_S,
                        help="SIGTERM during model load must end the user process within")
    parser.add_argument("--json", default="", help="write the rounds to this file")
    parser.add_argument("--plant", default="", help=f"plant bugs in the user process of every round but the final "
                        f"one, to show that the checks notice them: some of {', '.join(PLANTS)}")
    args = parser.parse_args(argv)
    if args.model_backend:
        os.environ["PYTRITON_TRITON_CONFIG_MODEL_BACKEND"] = args.model_backend  # the user process inherits it
    native = (args.model_backend or served_backend()) == "pytriton"
    args.faults = args.faults or ",".join(BACKEND_FAULTS if native else FAULTS)
    faults = [f for f in args.faults.split(",") if f]
    pid1_faults = [f for f in (args.pid1_faults or args.faults).split(",") if f]
    unknown = sorted(set(faults + pid1_faults) - set(FAULTS))
    if unknown:
        parser.error(f"unknown faults {unknown}; expected some of {', '.join(FAULTS)}")
    pid1_rounds = args.rounds if args.pid1_rounds is None else args.pid1_rounds

    plan = schedule(args.rounds, faults, 1, False)
    skipped = ""
    if pid1_rounds:
        permitted, why = can_run_as_pid1()
        if permitted:
            plan += schedule(pid1_rounds, pid1_faults, args.rounds + 1, True)
        else:
            skipped = f"PID 1 rounds skipped: {why}"
            log(skipped)
    plant = [name for name in args.plant.split(",") if name]
    if sorted(set(plant) - set(PLANTS)):
        parser.error(f"unknown plants {sorted(set(plant) - set(PLANTS))}; expected some of {', '.join(PLANTS)}")
    matrix = Matrix(args.heal_limit_s, args.term_at_load_exit_s, plant, native)
    started = time.monotonic()
    log(f"baseline: the matrix's /dev/shm entries {shm_cell(matrix.baseline)}, "
        f"the host's {shm_cell(matrix.host_baseline)}")
    for number, fault, pid1, target in plan:
        matrix.run_round(number, fault, pid1, target)
    final = matrix.final()
    rounds = [*matrix.rounds, final]
    failures = [f"{r.label} ({r.fault}{', PID 1' if r.pid1 else ''}): {f}" for r in rounds for f in r.failures]

    print(table(HEADERS, [row(r) for r in rounds]))
    print()
    print(LEGEND)
    host = final.host_delta or {}
    print(f"\nbaseline before round 1: the matrix's entries {shm_cell(matrix.baseline)}; the whole /dev/shm "
          f"{shm_cell(matrix.host_baseline)}, at the end {host.get('entries', 0):+d} entries, "
          f"{host.get('bytes', 0):+d} B (other programs on the host included; not judged)")
    print(f"entries without a server prefix used by the matrix's processes: {sorted(matrix.used) or 'none'}")
    print(f"{len(rounds) - 1} rounds and the final start+stop in {time.monotonic() - started:.0f} s")
    aborts = [r.label for r in rounds if r.triton_abort]
    if aborts:
        print(f"tritonserver's known abort (Triton 2.51, lock_exception after a stub's death) in {len(aborts)} "
              f"round(s): {', '.join(aborts)}; each ended loudly and is judged on what it left")
    if skipped:
        print(skipped)
    for r in rounds:
        for note in r.notes:
            print(f"note {r.label}: {note}")
    print("PASS" if not failures else "FAIL:\n  " + "\n  ".join(failures))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"rounds": [dataclasses.asdict(r) for r in rounds], "failures": failures,
                       "pid1_skipped": skipped, "baseline": matrix.baseline,
                       "host_baseline": {"entries": len(matrix.host_baseline),
                                         "bytes": sum(matrix.host_baseline.values())}},
                      out, indent=1, default=str)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
