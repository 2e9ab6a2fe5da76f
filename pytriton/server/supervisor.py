"""Supervision of a running server: notice a dead stub or a dead tritonserver, heal or report.

Triton 2.51 does not restart a Python-backend stub that died (killed by the OOM killer, a
segfault in a native library): every later request of its model fails with "Stub process ... is
not healthy" while the health endpoints keep answering 200. The `Supervisor` thread watches each
model instance's stub (its pid comes from the proxy's handshake with the worker) and the server
process itself, a few times a second:

- a dead stub: its model is unloaded at once (model and server readiness turn false), then
  loaded again through Triton's model-control API, which starts fresh stubs; a model whose
  stubs die more often than its restart budget allows stays down and the facade is told;
- a dead tritonserver: the stubs it left are killed and the facade is told, with the exit
  status and the last lines of the server's log.

What to do with the news (raise from ``serve()``, turn ``is_alive()`` false) is the facade's.
The pure parts (the restart budget, reading a dead process's exit status, describing it) are
module functions with unit tests.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import os
import threading
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Set

import psutil

from pytriton import children
from pytriton.exceptions import PyTritonModelRestartLimitError, PyTritonServerCrashedError, PyTritonServerError
from pytriton.exit_status import (
    describe_returncode,
    describe_stub_death,
    dying_words,
    known_cause,
    read_exit_status,
    read_fault_trace,
)
from pytriton.ipc import lost
from pytriton.ipc.lost import read_ledger
from pytriton.server.control import ServerControl
from pytriton.server.process import ServerProcess
from pytriton.server.workspace import kill_server_processes

logger = logging.getLogger("pytriton.server")

WATCH_PERIOD_S = 0.25
"""How often stubs and the server are checked; a death is acted on within about this long."""
TIDY_PERIOD_S = 1.0
"""How often the regions of models loaded behind the library's back are made private."""
UNLOAD_SETTLE_S = 1.5
"""How long a healing waits for the dead instance's old model version to finish unloading."""
RELOAD_TIMEOUT_S = 60.0


@dataclasses.dataclass(frozen=True)
class InstanceView:
    """One model instance as the supervisor sees it: whose stub serves it, if one connected yet."""

    model: str
    version: int
    instance: int
    stub_pid: Optional[int]


class RestartBudget:
    """At most `max_restarts` restarts within any `window_s` seconds (pure bookkeeping).

    Args:
        max_restarts: restarts allowed in the window; 0 never restarts.
        window_s: the length of the sliding window.
    """

    def __init__(self, max_restarts: int, window_s: float) -> None:
        self.max_restarts = max_restarts
        self.window_s = window_s
        self._times: Deque[float] = collections.deque()
        self.total = 0

    def allow(self, now: float) -> bool:
        """Record a restart at `now` if the budget allows it; False when it is spent."""
        while self._times and now - self._times[0] > self.window_s:
            self._times.popleft()
        if len(self._times) >= self.max_restarts:
            return False
        self._times.append(now)
        self.total += 1
        return True


class _Stub:
    """A stub process first seen alive, remembered so that a reused pid is never mistaken for it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        try:
            self.process: Optional[psutil.Process] = psutil.Process(pid)
        except psutil.NoSuchProcess:
            self.process = None

    def dead(self) -> bool:
        if self.process is None:
            return True
        try:
            return not self.process.is_running() or self.process.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True


class Supervisor:
    """Watches one tritonserver and its model instances from a thread of its own.

    Args:
        process: the server process.
        control: the library's control calls to that server.
        instances: the instances of every bound model, read on each check.
        budget_for: the restart budget of a model (called once per model).
        forget_instance: called with (model, version, instance) after its stub died and before the
            model is loaded again: removes what the dead stub left (its shared-memory segments).
        after_reload: called with the model name once it serves again.
        on_fatal: called once with the error that ends serving (the server died, or a model spent
            its restart budget).
        server_id: the prefix every process of this server carries in its command line.
        tidy: called about once a second: makes the shared-memory regions of models loaded by
            other means (a client's model-control call, a `RemoteTriton`) private too.
        fault_traces: the path of a stub's fault trace by its pid (`protocol.fault_trace_path`).
        hang_check: called each round: acts on callables stuck past their model's
            ``hang_timeout_s`` (`pytriton.server.hangs.HangWatch`).
        inflight_ledgers: the path of a stub's ledger of unanswered relayed requests by its pid
            (`protocol.inflight_ledger_path`): a heal publishes what a dead stub left there
            (`pytriton.ipc.lost`).
    """

    def __init__(
        self,
        *,
        process: ServerProcess,
        control: ServerControl,
        instances: Callable[[], List[InstanceView]],
        budget_for: Callable[[str], RestartBudget],
        forget_instance: Callable[[str, int, int], object],
        after_reload: Callable[[str], object],
        on_fatal: Callable[[PyTritonServerError], None],
        server_id: str,
        period_s: float = WATCH_PERIOD_S,
        tidy: Optional[Callable[[], object]] = None,
        fault_traces: Optional[Callable[[int], Optional[str]]] = None,
        hang_check: Optional[Callable[[], object]] = None,
        inflight_ledgers: Optional[Callable[[int], str]] = None,
    ) -> None:
        self._process = process
        self._control = control
        self._instances = instances
        self._budget_for = budget_for
        self._forget_instance = forget_instance
        self._after_reload = after_reload
        self._on_fatal = on_fatal
        self._server_id = server_id
        self._period_s = period_s
        self._tidy = tidy
        self._fault_traces = fault_traces
        self._hang_check = hang_check
        self._inflight_ledgers = inflight_ledgers
        self._tidy_every = max(1, round(TIDY_PERIOD_S / period_s))
        self._stubs: Dict[int, _Stub] = {}
        self._buried: Set[int] = set()  # dead stubs already acted on
        self._budgets: Dict[str, RestartBudget] = {}
        self._down: Set[str] = set()
        self._stop = threading.Event()
        self._report_lock = threading.Lock()
        self._server_reported = False
        self.stuck_versions = 0
        """Model versions that never finished unloading after their stub died mid-request (Triton
        2.51 keeps their requests); the server's own shutdown then waits for them in vain."""
        self._thread = threading.Thread(target=self._run, name="pytriton-supervisor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop watching (before the server is stopped on purpose, so its exit is no news).

        A server already dead is news, though: `serve()` may have seen the death first (the
        watcher looks every `WATCH_PERIOD_S`, and not while it heals a model) and be stopping
        because of it. It is reported here unless the watcher did, so that `serve()` raises.
        """
        self._stop.set()
        if self._thread is threading.current_thread():
            return
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        self.check_server()

    def down_models(self) -> List[str]:
        """Models that are not serving right now (being restarted, or given up)."""
        return sorted(self._down)

    def restarts(self, model: str) -> int:
        budget = self._budgets.get(model)
        return budget.total if budget is not None else 0

    def stub_pids(self) -> List[int]:
        return list(self._stubs)

    # -- the loop --------------------------------------------------------------------------------

    def _run(self) -> None:
        rounds = 0
        while not self._stop.wait(self._period_s):
            rounds += 1
            try:
                reap_adopted(exclude=self._process.pid)
                if not self._process.is_running():
                    self._server_died()
                    return
                self._check_instances()
                if self._hang_check is not None:
                    self._hang_check()
                if self._tidy is not None and rounds % self._tidy_every == 0:
                    self._tidy()
            except Exception:
                logger.exception("pytriton supervisor: unexpected error while checking the server")

    def _check_instances(self) -> None:
        dead: Dict[str, List[InstanceView]] = {}
        for view in self._instances():
            if view.stub_pid is None or view.stub_pid in self._buried:
                continue
            stub = self._stubs.get(view.stub_pid)
            if stub is None:
                stub = self._stubs[view.stub_pid] = _Stub(view.stub_pid)
            if stub.dead():
                dead.setdefault(view.model, []).append(view)
        for model, views in dead.items():
            if self._stop.is_set():
                return
            if not self._unloaded_on_request(model, views):
                self._heal(model, views)

    def _unloaded_on_request(self, model: str, views: List[InstanceView]) -> bool:
        """Whether the stubs ended because a client unloaded the model (``ModelClient.unload_model``).

        Triton keeps listing a model whose stub died as READY; one unloaded through the
        model-control API is listed UNLOADING, then UNAVAILABLE, and LOADING when a client
        loads it again before this round saw the old stub's end. Such stubs ended as asked:
        what they left is removed and nothing is restarted (a later load starts fresh stubs).
        """
        versions = {str(view.version) for view in views}
        try:
            states = [entry.get("state") for entry in self._control.repository_index(2.0)
                      if entry.get("name") == model and entry.get("version") in versions]
        except PyTritonServerError:
            return False
        if not states or any(state not in ("UNLOADING", "UNAVAILABLE", "LOADING") for state in states):
            return False
        for view in views:
            if view.stub_pid is not None:
                self._buried.add(view.stub_pid)
                self._stubs.pop(view.stub_pid, None)
            self._forget_instance(model, view.version, view.instance)
        if "LOADING" in states:
            # Unloaded and being loaded again (``unload_model()`` then ``load_model()``): the old
            # stub's end is seen only now, and healing would unload the new load.
            logger.info("Model '%s' was unloaded through the model-control API and is being loaded again", model)
        else:
            logger.info("Model '%s' was unloaded through the model-control API; it is not restarted", model)
        return True

    def _heal(self, model: str, views: List[InstanceView]) -> None:
        causes: Dict[int, str] = {}  # instance -> how its stub died, in words
        for view in views:
            if view.stub_pid is None:
                continue
            trace = self._fault_traces(view.stub_pid) if self._fault_traces is not None else None
            traced = trace is not None and os.path.exists(trace)
            status = read_exit_status(view.stub_pid)
            if status is None:
                status = read_fault_trace(trace)
            causes[view.instance] = describe_stub_death(status, traced)
            if trace is not None:
                try:
                    os.unlink(trace)
                except OSError:
                    pass
        for view in views:
            if view.stub_pid is not None:
                self._buried.add(view.stub_pid)
                self._stubs.pop(view.stub_pid, None)
        self._down.add(model)
        budget = self._budgets.get(model)
        if budget is None:
            budget = self._budgets[model] = self._budget_for(model)
        what = ", ".join(
            f"instance {model}_0_{instance} (stub pid {pid}) {causes.get(instance, describe_stub_death(None, False))}"
            for instance, pid in sorted((v.instance, v.stub_pid) for v in views)
        )
        allowed = budget.allow(time.monotonic())
        # Read before the unload: the configuration is gone while the model is away.
        reload_config = self._config_with_lost_requests(model, views, causes) if allowed else None
        self._unload(model)  # at once: model and server readiness turn false while it is away
        if not allowed:
            message = (
                f"Model '{model}': {what}; its instances died {budget.max_restarts + 1} times within "
                f"{budget.window_s:.0f} s, more than its restart budget (ModelConfig(max_restarts="
                f"{budget.max_restarts}, restart_window_s={budget.window_s:g})); the model stays down"
            )
            logger.error("%s", message)
            self._on_fatal(PyTritonModelRestartLimitError(message))
            return
        logger.warning("Model '%s': %s; restarting the model (restart %d, at most %d within %.0f s)",
                       model, what, budget.total, budget.max_restarts, budget.window_s)
        started = time.monotonic()
        self._wait_unloaded(model, views[0].version)
        for view in views:
            self._forget_instance(model, view.version, view.instance)
        if self._stop.is_set():
            return
        try:
            config_json = None if reload_config is None else json.dumps(reload_config)
            self._control.load_model(model, RELOAD_TIMEOUT_S, config_json=config_json)
        except PyTritonServerError as exc:
            if self._stop.is_set() or not self._process.is_running():
                return
            message = f"Model '{model}': {what}; loading it again failed: {exc}"
            logger.error("%s", message)
            self._on_fatal(PyTritonModelRestartLimitError(message))
            return
        self._after_reload(model)
        self._down.discard(model)
        logger.warning("Model '%s' serves again, %.1f s after its restart began", model, time.monotonic() - started)

    def _config_with_lost_requests(self, model: str, views: List[InstanceView],
                                   causes: Dict[int, str]) -> Optional[Dict[str, Any]]:
        """The model's configuration with a notice of the requests its dead stubs left unanswered
        (`pytriton.ipc.lost`), to load it with; None when they left none (a plain reload)."""
        if self._inflight_ledgers is None:
            return None
        notices = []
        for view in views:
            if view.stub_pid is None:
                continue
            path = self._inflight_ledgers(view.stub_pid)
            ids = read_ledger(path)
            try:
                os.unlink(path)
            except OSError:
                pass
            if ids:
                notices.append(lost.notice(f"{model}_0_{view.instance}", view.stub_pid, causes[view.instance],
                                           time.time(), ids))
        if not notices:
            return None
        try:
            config = self._control.model_config(model, 2.0)
        except PyTritonServerError as exc:
            logger.warning("Model '%s': could not read its configuration to name the %d request(s) its dead "
                           "instance left unanswered (%s); their clients wait for their own timeout", model,
                           sum(len(found["ids"]) for found in notices), exc)
            return None
        for found in notices:
            config = lost.with_notice(config, found, time.time())
        logger.warning("Model '%s': %d request(s) were in flight on the dead instance and will not be answered; "
                       "pytriton's clients end them with an error", model, sum(len(found["ids"]) for found in notices))
        return config

    def _unload(self, model: str) -> None:
        try:
            self._control.unload_model(model, 10.0)
        except PyTritonServerError as exc:
            logger.warning("Model '%s': could not unload it after its instance died: %s", model, exc)

    def _wait_unloaded(self, model: str, version: int) -> None:
        """Wait briefly for the dead version to leave; count it as stuck when it does not.

        A stub killed in the middle of a request leaves that request's bookkeeping in the
        server, and Triton 2.51 then never completes the unload. Loading the model again works
        all the same (the new version serves beside the stuck one), but the server's own
        shutdown will wait for the stuck version until its exit timeout; `stuck_versions` lets
        the facade stop it sooner.
        """
        deadline = time.monotonic() + UNLOAD_SETTLE_S
        while not self._stop.is_set():
            try:
                states = [entry.get("state") for entry in self._control.repository_index(2.0)
                          if entry.get("name") == model and entry.get("version") == str(version)]
            except PyTritonServerError:
                return
            if "UNLOADING" not in states:
                return
            if time.monotonic() >= deadline:
                self.stuck_versions += 1
                logger.debug("Model '%s' version %d: the dead instance's version does not finish unloading",
                             model, version)
                return
            time.sleep(0.05)

    def check_server(self) -> None:
        """Report a dead server now, from the caller's thread, if the watcher has not yet."""
        if not self._process.is_running():
            self._server_died()

    def _server_died(self) -> None:
        with self._report_lock:  # held throughout: a caller of check_server() sees the report done
            if self._server_reported:
                return
            self._server_reported = True
            returncode = self._process.returncode
            killed = self.kill_leftovers()
            output = self._process.output()
            tail = "\n".join(output[-20:])
            message = (
                f"tritonserver (pid {self._process.pid}) {describe_returncode(returncode)} while serving; "
                f"{len(killed)} stub process(es) it left were killed."
            )
            why = dying_words(output)
            if why:
                message += " Why, in its words:\n" + "\n".join(why)
                cause = known_cause(why)
                if cause:
                    message += "\n" + cause
            message += f"\nIts last output:\n{tail}"
            logger.error("%s", message)
            self._on_fatal(PyTritonServerCrashedError(message, returncode=returncode, log_tail=tail))

    def kill_leftovers(self) -> List[int]:
        """Kill every process of this server still running (stubs orphaned by a dead server)."""
        known = [stub.process for stub in self._stubs.values() if stub.process is not None and not stub.dead()]
        return kill_server_processes({self._server_id}, exclude=self._process.pid, known=known)


def reap_adopted(exclude: Optional[int] = None) -> List[int]:
    """As PID 1 (a container's process), wait for the zombies this process adopted; their pids.

    Orphans of a PID namespace are reparented to its PID 1, and Python reaps only the children
    it started itself; stubs left by a killed tritonserver would stay ``<defunct>``. Children
    that are not zombies yet, and `exclude` (the server, whose status `subprocess` reads), are
    left alone, and so are the worker processes of process instances (`pytriton.children`): their
    parent waits for them, to tell their requests how they ended. Elsewhere this does nothing: a
    user's own children are theirs to wait for.
    """
    if os.getpid() != 1:
        return []
    reaped = []
    with children.LOCK:
        for child in psutil.Process().children():
            try:
                if child.pid == exclude or children.is_kept(child.pid) or child.status() != psutil.STATUS_ZOMBIE:
                    continue
                os.waitpid(child.pid, os.WNOHANG)
                reaped.append(child.pid)
            except (psutil.NoSuchProcess, ChildProcessError):
                pass
    return reaped
