"""pytriton.notices: lines seen on stderr without any logging set up, and never twice once it is."""

from __future__ import annotations

import io
import logging
import sys

from pytriton.notices import handled_elsewhere, notice_logger


def _bare(monkeypatch) -> io.StringIO:
    """The logging tree as a script that configured nothing has it: pytest's capture handlers, which
    it adds to the root logger for the test's call, taken away; stderr read back."""
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    return stderr


def test_a_notice_reaches_stderr_when_nothing_is_configured(monkeypatch):
    bare_logging = _bare(monkeypatch)
    logger = notice_logger("pytriton.test_notice_bare")
    logger.info("serving %s", "Scale")
    logger.debug("not at INFO")
    assert bare_logging.getvalue() == "pytriton: serving Scale\n"


def test_a_configured_handler_gets_the_notice_and_stderr_does_not_get_it_twice(monkeypatch):
    bare_logging = _bare(monkeypatch)
    seen = io.StringIO()
    handler = logging.StreamHandler(seen)
    monkeypatch.setattr(logging.getLogger(), "handlers", [handler])
    notice_logger("pytriton.test_notice_configured").info("serving %s", "Scale")
    assert seen.getvalue() == "serving Scale\n"
    assert bare_logging.getvalue() == ""


def test_a_level_the_application_set_is_kept(monkeypatch):
    bare_logging = _bare(monkeypatch)
    logging.getLogger("pytriton.test_notice_quiet").setLevel(logging.WARNING)
    notice_logger("pytriton.test_notice_quiet").info("serving")
    assert bare_logging.getvalue() == ""


def test_handlers_are_found_up_the_tree_until_propagation_stops():
    own = logging.NullHandler()
    parent = logging.getLogger("pytriton.test_walk")
    child = logging.getLogger("pytriton.test_walk.child")
    child.addHandler(own)
    other = logging.NullHandler()
    other.setLevel(logging.ERROR)
    parent.addHandler(other)
    try:
        assert handled_elsewhere(child, logging.ERROR, own)
        child.propagate = False
        assert not handled_elsewhere(child, logging.ERROR, own)
    finally:
        child.propagate = True
        child.removeHandler(own)
        parent.removeHandler(other)
