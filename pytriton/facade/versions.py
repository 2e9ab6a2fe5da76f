"""A bound name's versions while the server serves: load one beside those that serve, unbind one.

Shared by `Triton` and `RemoteTriton`; the facades only say how their server loads a model.

Swapping a model without downtime is two steps: bind version 2 while version 1 serves, then
unbind version 1. Triton keeps one configuration per model name, and serves by default only the
highest version in the model's folder. So pytriton writes the bound versions into the name's
config.pbtxt as a ``specific`` version policy (`pytriton.repository.versions`) and loads the
model again through the model-control API whenever that set changes. Triton 2.51 then loads
what joined and drops what left, and updates the versions that stay in place: they go on
serving throughout, with their instances and connections untouched. That holds only while the
served configuration is the same for every version apart from the policy (else Triton reloads
the serving versions too), so a version whose tensors or options differ is refused at `bind`,
and its version folder must never change once it serves (`pytriton.repository.writer`).
Requests that name no version go to the highest version that is ready: to version 2 from the
moment it is.

Each version's instances reach that version's own workers, whenever they connect (the version
is part of the socket paths: `pytriton.facade.bound`). A version that leaves is dropped by Triton once
its requests in flight are answered; only then do its handlers stop and its files and segments go.
A joining version that fails to load is unbound again, and the failure Triton keeps on record
(which holds a strict server not ready) is cleared without touching the versions that serve
(`forget_failed_version`).
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib
import time
from typing import Callable, Dict, List, NoReturn, Optional, Sequence

from pytriton.exceptions import PyTritonInvalidOperationError, PyTritonServerError
from pytriton.facade.binding import ModelBindings
from pytriton.facade.bound import BoundModel, ModelDeclaration
from pytriton.facade.launch import MODEL_LOAD_TIMEOUT_S, load_watching_signals, refuse_foreign_model
from pytriton.ipc.channel import pid_alive
from pytriton.server.control import ServerControl, wait_for

logger = logging.getLogger("pytriton.triton")

UNLOAD_TIMEOUT_S = 60.0
"""How long an unbind waits for the server to drop a version (its requests in flight first)."""
STREAMS_GRACE_S = 30.0
"""After this long, the open streams of a version being dropped are cut short (Triton waits for them)."""
STUB_EXIT_S = 10.0
"""How long an unbind waits for the dropped versions' stubs to exit (the proxy path)."""
_INDEX_TIMEOUT_S = 10.0
_LOADED_STATES = ("READY", "LOADING", "UNLOADING")


def check_can_add(
    bindings: ModelBindings, model_name: str, running: bool, control: Optional[ServerControl] = None
) -> None:
    """Refuse another version of a bound name before the server runs; with `control` (`Triton`'s),
    a new name that the running server serves for another process.

    A name's versions load one after the other (a joining version loads beside the versions that
    serve), so a second version waits until the server runs and loads the first.

    Raises:
        PyTritonInvalidOperationError: saying which, and what to do instead.
    """
    if model_name in bindings and not running:
        raise PyTritonInvalidOperationError(
            f"model '{model_name}' is bound already: bind its other version once the server runs (after run(), "
            "or inside `with`), where it loads beside the version that serves")
    if running and control is not None and model_name not in bindings:
        refuse_foreign_model(control, model_name)


def load_bound(
    bindings: ModelBindings,
    control: ServerControl,
    model_name: str,
    version: int,
    repository: pathlib.Path,
    *,
    watch_signals: bool,
    on_signal: Callable[[int], NoReturn],
    wait_ready: Callable[[], object],
    start: Optional[Callable[[ModelDeclaration], BoundModel]] = None,
) -> None:
    """Load `version` of `model_name`, bound by `ModelBindings.start` while `Triton`'s server runs.

    The load runs on a thread while this one watches for SIGINT and SIGTERM (with
    `watch_signals`; `on_signal` stops the server). On failure the version is unbound again
    (`undo_load`, which uses `start` to clear what Triton recorded of a joining version's failure)
    and the error raised.
    """
    others = prepare_load(bindings, model_name, version, repository)
    signum, failure = load_watching_signals(control, model_name, watch_signals)
    if signum is not None:
        on_signal(signum)
    try:
        if failure is not None:
            raise failure
        wait_ready()
    except BaseException:
        undo_load(bindings, control, model_name, version, repository, others, start=start)
        raise


def prepare_load(bindings: ModelBindings, model_name: str, version: int, repository: pathlib.Path) -> List[int]:
    """Ready the folder for loading `version` of `model_name` (bound by `ModelBindings.start`).

    A version that joins others gets the config.pbtxt that serves them all. Returns
    the other bound versions (empty for a name's first version, whose folder is ready as written).
    """
    others = [v for v in bindings.models.versions(model_name) if v != version]
    if others:
        bindings.write_config(model_name, repository)
    return others


def undo_load(
    bindings: ModelBindings,
    control: ServerControl,
    model_name: str,
    version: int,
    repository: pathlib.Path,
    others: Sequence[int],
    reload: Optional[Callable[[], None]] = None,
    start: Optional[Callable[[ModelDeclaration], BoundModel]] = None,
) -> None:
    """Unbind a version whose load failed (or was cut short), leaving the others as they served.

    A first version goes with what Triton recorded of its failure (which keeps a strict server
    not ready, see `ServerControl.forget_failed_model`). A joining version goes from the folder,
    and the name is loaded again with the versions that serve (`reload`), so that Triton's
    policy names them only; a failure of that load is logged, not raised over the first error.
    `reload` defaults to a load from the server's repository. Triton keeps the failed version's
    record, which would keep a strict server not ready until that version number loads:
    `forget_failed_version` clears it, with `start` (the facade's `ModelBindings.start`; None:
    the record stays, said in the log). A joining version's warm-ups run in the user's process
    first (`ModelBindings.start`), so the usual failure, a callable that fails its warm-up, never
    reaches Triton.
    """
    if not others:
        bindings.discard(model_name, repository)
        control.forget_failed_model(model_name, MODEL_LOAD_TIMEOUT_S, bindings.backend)
        return
    bindings.write_config(model_name, repository, others)
    try:  # before the handlers stop: a version Triton did load is dropped first
        (reload or _from_repository(control, model_name))()
        _wait_dropped(control, model_name, [bindings.models.get(model_name, version)])
    except PyTritonServerError as exc:
        logger.warning("model '%s': loading it again with version(s) %s after version %d failed: %s", model_name,
                       list(others), version, exc)
    bindings.discard(model_name, repository, version)
    if start is not None and failure_recorded(control, model_name, version):
        forget_failed_version(bindings, control, model_name, version, repository, start, reload)
    if failure_recorded(control, model_name, version):
        logger.warning("model '%s' version %d failed to load; Triton 2.51 keeps that failure, and the server reports "
                       "not ready until a version %d of the model loads: bind it again once it can load (the "
                       "served version(s) %s serve on meanwhile)", model_name, version, version, list(others))


def failure_recorded(control: ServerControl, model_name: str, version: int) -> bool:
    """Whether the server holds a failed load of `version` of `model_name` (which keeps it not ready).

    Read from the repository index (a version's state with a reason other than "unloaded"); a model
    sent with its files is not listed there, and then the server's readiness says.
    """
    try:
        entries = control.repository_index(_INDEX_TIMEOUT_S)
    except PyTritonServerError:
        return not control.is_ready()
    listed = [e for e in entries if e.get("name") == model_name and e.get("version") == str(version)]
    if not listed:
        return not control.is_ready()
    return any(e.get("state") != "READY" and e.get("reason", "") not in ("", "unloaded") for e in listed)


def forget_failed_version(
    bindings: ModelBindings,
    control: ServerControl,
    model_name: str,
    version: int,
    repository: pathlib.Path,
    start: Callable[[ModelDeclaration], BoundModel],
    reload: Optional[Callable[[], None]] = None,
) -> None:
    """Clear Triton's record of a joining `version` that failed to load, the versions that serve untouched.

    Triton 2.51 forgets a version's failure only when a version of that number loads; until then a
    strict server reports not ready, though the versions that serve do serve. A placeholder loaded
    under the name would bring its own configuration, and Triton would reload the serving versions
    with it. So the number is loaded once as a copy of the highest version that serves: its
    callables, its configuration (Triton then updates the serving versions in place, as for any
    joining version), its handlers of its own (`start`); and dropped again at once, by the load of
    the serving versions alone, which leaves the number's record "unloaded". For the moment the copy
    is loaded, requests that name no version may reach it (it is the highest): they get the answers
    of the version that serves, from its callables. Best effort: a failure is logged.
    """
    load = reload or _from_repository(control, model_name)
    served = bindings.models.get(model_name)
    copy = dataclasses.replace(served.declaration,
                               context=dataclasses.replace(served.declaration.context, model_version=version))
    others = bindings.models.versions(model_name)
    started = time.monotonic()
    try:
        stand_in = start(copy)
    except Exception as exc:  # noqa: BLE001 - logged: the failed bind's own error is on its way to the user
        logger.warning("model '%s': could not start a copy of version %d to clear version %d's failure: %s",
                       model_name, served.version, version, exc)
        return
    try:
        bindings.write_config(model_name, repository)  # the copy with the versions that serve
        load()
        wait_for(lambda: control.is_model_ready(model_name, version), time.monotonic() + MODEL_LOAD_TIMEOUT_S,
                 lambda: True, interval_s=0.05)
    except PyTritonServerError as exc:
        logger.warning("model '%s': a copy of version %d under version %d did not load: %s", model_name,
                       served.version, version, exc)
    finally:
        bindings.write_config(model_name, repository, others)
        try:
            load()
            _wait_dropped(control, model_name, [stand_in])
        except PyTritonServerError as exc:
            logger.warning("model '%s': loading it again with version(s) %s: %s", model_name, others, exc)
        bindings.discard(model_name, repository, version)
    logger.info("model '%s': loaded a copy of version %d as version %d and dropped it (%.2f s), to clear the failed "
                "load's record", model_name, served.version, version, time.monotonic() - started)


def check_unbind(bindings: ModelBindings, owner: str, model_name: str, version: Optional[int]) -> None:
    """Refuse an unbind of what is not bound here, or of a model an ensemble bound here uses.

    Raises:
        PyTritonInvalidOperationError: naming what is bound, or the ensemble to unbind first.
    """
    if not isinstance(model_name, str) or model_name not in bindings:
        raise PyTritonInvalidOperationError(
            f"cannot unbind model {model_name!r}: no model of that name is bound to this {owner} "
            f"(bound: {bindings.names()})")
    versions = bindings.models.versions(model_name)
    if version is not None and (isinstance(version, bool) or version not in versions):
        raise PyTritonInvalidOperationError(
            f"cannot unbind model '{model_name}' version {version!r}: that version is not bound to this {owner} "
            f"(bound versions: {versions}); model_version=None unbinds every version")
    leaving = versions if version is None else [version]
    for ensemble in bindings.models.all():
        plan = ensemble.declaration.ensemble
        used = [step.model_version for step in (plan.steps if plan is not None else ())
                if step.model_name == model_name and step.model_version in leaving]
        if used:
            raise PyTritonInvalidOperationError(
                f"cannot unbind model '{model_name}' version {used[0]}: ensemble '{ensemble.name}' bound to this "
                f"{owner} runs it as a step; unbind ensemble '{ensemble.name}' first")


def unbind(
    bindings: ModelBindings,
    control: Optional[ServerControl],
    model_name: str,
    version: Optional[int],
    repository: pathlib.Path,
    reload: Optional[Callable[[], None]] = None,
) -> None:
    """Unbind `version` of `model_name` (None: every version), checked by `check_unbind`.

    With `control` (the model was loaded), the server drops the versions first: when others
    stay, by loading the name again with those only (`reload`, by default from the server's
    repository), else by unloading it; either way after their requests in flight. Then their
    handlers stop and their files and segments go.

    Raises:
        PyTritonServerError: the server refused the unload, or the load with the versions that stay.
    """
    models = bindings.models
    versions = models.versions(model_name)
    leaving = versions if version is None else [version]
    staying = [v for v in versions if v not in leaving]
    gone = [models.get(model_name, v) for v in leaving]
    if control is not None:
        if staying:
            bindings.write_config(model_name, repository, staying)
            try:
                (reload or _from_repository(control, model_name))()
            except BaseException:
                bindings.write_config(model_name, repository)
                raise
        else:
            control.unload_model(model_name, _INDEX_TIMEOUT_S)
        _wait_dropped(control, model_name, gone)
    bindings.discard(model_name, repository, version if staying else None)
    logger.info("Unbound model '%s' version(s) %s%s", model_name, leaving,
                f"; version(s) {staying} serve on" if staying else "")


def _from_repository(control: ServerControl, model_name: str) -> Callable[[], None]:
    return lambda: control.load_model(model_name, MODEL_LOAD_TIMEOUT_S)


def _wait_dropped(control: ServerControl, model_name: str, gone: Sequence[BoundModel]) -> None:
    """Wait until the server no longer holds the versions `gone` (their requests answered).

    The repository index says when a version is unloaded. A model sent with its files (a
    `RemoteTriton` without a shared workspace) is not listed there: it counts as dropped once no
    version of `gone` answers ready and their handlers are idle. Streams still open after
    `STREAMS_GRACE_S` are cut short; after `UNLOAD_TIMEOUT_S` the unbind goes on without waiting.
    Then, on the proxy path, the versions' stub processes are given `STUB_EXIT_S` to end (they
    finish after Triton reports the version unloaded, and remove their files as they go).
    """
    wanted = {str(model.version) for model in gone}

    def dropped() -> bool:
        try:
            entries: List[Dict[str, str]] = control.repository_index(_INDEX_TIMEOUT_S)
        except PyTritonServerError as exc:
            logger.warning("model '%s': %s; not waiting for its unload", model_name, exc)
            return True
        listed = [e for e in entries if e.get("name") == model_name and e.get("version") in wanted]
        if listed:
            return not any(e.get("state") in _LOADED_STATES for e in listed)
        return (not any(control.is_model_ready(model_name, model.version) for model in gone)
                and all(handler.idle() for model in gone for handler in model.handlers))

    started = time.monotonic()
    stubs = [pid for model in gone for pid in (handler.proxy_pid for handler in model.handlers) if pid]
    if not wait_for(dropped, started + STREAMS_GRACE_S, lambda: True, interval_s=0.05):
        for model in gone:
            for handler in model.handlers:
                handler.end_streams()
        if not wait_for(dropped, started + UNLOAD_TIMEOUT_S, lambda: True, interval_s=0.05):
            logger.warning("the server still holds model '%s' version(s) %s after %.0f s; unbinding them anyway",
                           model_name, sorted(wanted), UNLOAD_TIMEOUT_S)
            return
    if not wait_for(lambda: not any(pid_alive(pid) for pid in stubs), time.monotonic() + STUB_EXIT_S, lambda: True):
        logger.warning("model '%s': stub process(es) %s of the unloaded version(s) still run", model_name, stubs)
