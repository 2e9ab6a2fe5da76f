"""Stopping the bindings never hangs on a ZeroMQ socket that a cut-short `bind` left open.

A SIGTERM inside `ModelBindings.start` (`TerminationScope` raises there) can interrupt a handler's
construction after it opened its control socket; no handler then closes that socket, and ending
a ZeroMQ context waits for every socket it holds (1 stop in 30 of the fault matrix's SIGTERM
during a `bind` hung there for good).
"""

from __future__ import annotations

import time

import pytest
import zmq

from pytriton.facade.binding import _ZMQ_TERM_S, ModelBindings

pytestmark = pytest.mark.integration


def test_stop_handlers_returns_although_an_orphan_socket_holds_the_context(tmp_path):
    bindings = ModelBindings("test", on_unrecoverable=lambda model: None)
    context = zmq.Context()
    bindings._zmq = context
    orphans = []

    # What a handler constructor interrupted after its first socket leaves: one socket the context
    # knows of (closed by the stop), and one it cannot close (made through another handle of the
    # same context, as an object freed without closing would be): the stop must not wait for it.
    known = context.socket(zmq.ROUTER)
    known.bind(f"ipc://{tmp_path}/known")
    unknown = zmq.Context.shadow(context.underlying).socket(zmq.ROUTER)
    unknown.bind(f"ipc://{tmp_path}/unknown")
    orphans.extend([known, unknown])
    started = time.monotonic()
    bindings.stop_handlers()
    assert time.monotonic() - started < _ZMQ_TERM_S + 1.0
    assert bindings._zmq is None
    assert known.closed
    unknown.close(linger=0)  # lets the context's end, still waiting in its thread, finish
