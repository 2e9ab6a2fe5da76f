"""A client with no server behind it says so within seconds, without any logging set up.

The wait itself is the contract (``init_timeout_s``, 300 s by default); these tests shorten it
and watch the client's stderr as a user's terminal would show it. No tritonserver is started:
the port is one nothing listens on.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest
from support import free_ports

pytestmark = pytest.mark.functional

SCRIPT = textwrap.dedent("""
    import logging, sys
    import numpy as np
    from pytriton.client import ModelClient
    from pytriton.client.exceptions import PyTritonClientTimeoutError

    url, timeout_s, configured, explicit = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1"
    if configured:
        logging.basicConfig(level=logging.INFO, format="app: %(name)s %(message)s")
    print("client starts", file=sys.stderr, flush=True)
    try:
        if explicit:  # the wait's own timeout, the client's init_timeout_s left at its default
            with ModelClient(url, "Scale") as client:
                client.wait_for_model(timeout_s=timeout_s)
        else:
            with ModelClient(url, "Scale", init_timeout_s=timeout_s) as client:
                client.infer_sample(values=np.zeros(3, np.float32))
    except PyTritonClientTimeoutError as error:
        print("timed out:", error, file=sys.stderr, flush=True)
""")

NOTICE_BOUND_S = 5.0
"""The notice comes after 2 s of waiting; the bound leaves room for a busy machine."""


def _watch(url: str, timeout_s: float, configured: bool, explicit: bool = False) -> list:
    """The client's stderr lines, each with the seconds since the client started waiting."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    process = subprocess.Popen([sys.executable, "-c", SCRIPT, url, str(timeout_s), "1" if configured else "0",
                                "1" if explicit else "0"], stderr=subprocess.PIPE, text=True, env=env)
    lines, started = [], None
    try:
        for line in process.stderr:
            now = time.monotonic()
            if line.startswith("client starts"):
                started = now
            elif started is not None:
                lines.append((round(now - started, 2), line.rstrip("\n")))
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
        process.wait()
    assert started is not None, lines
    return lines


@pytest.mark.parametrize("scheme", ["http", "grpc"])
def test_a_client_without_a_server_says_so_within_seconds(scheme):
    port = free_ports(1)[0]
    url = f"{scheme}://localhost:{port}"
    lines = _watch(url, 5.0, configured=False)
    notices = [(at, text) for at, text in lines if text.startswith("pytriton: ")]
    assert notices, lines
    first_at, first = notices[0]
    assert first_at < NOTICE_BOUND_S, lines
    assert f"nothing listens at {url} yet" in first, first
    assert "waiting up to 5 s (init_timeout_s) for the server and model 'Scale'" in first, first
    # The contract's error still ends the wait, after the whole init_timeout_s.
    (timed_out,) = [(at, text) for at, text in lines if text.startswith("timed out:")]
    assert timed_out[0] >= 4.5, lines
    assert "were not ready within 5 s" in timed_out[1]


def test_the_notice_goes_through_the_applications_logging_once_it_is_configured():
    port = free_ports(1)[0]
    lines = _watch(f"http://localhost:{port}", 3.0, configured=True)
    texts = [text for _, text in lines]
    assert not [text for text in texts if text.startswith("pytriton: ")], texts  # not doubled on stderr
    assert len([text for text in texts if text.startswith("app: pytriton.client.wait nothing listens")]) == 1, texts


def test_an_explicit_wait_names_the_timeout_it_was_given():
    """``wait_for_model(timeout_s=...)`` says "(timeout_s)", not the init_timeout_s it does not use."""
    port = free_ports(1)[0]
    lines = _watch(f"http://localhost:{port}", 3.0, configured=False, explicit=True)
    notices = [text for _, text in lines if text.startswith("pytriton: ")]
    assert notices, lines
    assert "waiting up to 3 s (timeout_s) for the server and model 'Scale'" in notices[0], notices
