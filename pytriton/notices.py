"""The few lines a user must see without configuring logging, and never twice once they do.

A serving script that says nothing leaves its user guessing: is it serving, where, is Ctrl+C
being handled? A client that waits for a server in silence looks hung. Both sides therefore
log a handful of lines (what is served where, that a stop drains, what a client waits for)
on loggers made by `notice_logger`, in the way uvicorn makes its own start lines visible: the
logger has level INFO and a handler of its own that writes to stderr.

That handler writes a record only when no other handler would: as soon as the application
configures logging (``logging.basicConfig``, a handler on ``pytriton`` or on the root logger,
pytest's capture), the records go through the application's handlers alone, so they are
neither lost nor doubled. To silence the lines, raise the level:
``logging.getLogger("pytriton.serve").setLevel(logging.WARNING)``.
"""

from __future__ import annotations

import logging
import sys

NOTICE_FORMAT = "pytriton: %(message)s"
"""How the fallback handler writes a line."""


class FallbackHandler(logging.Handler):
    """Writes to stderr (the current ``sys.stderr``, so a redirection is followed) the records
    that no other handler on their way up the logger tree would write."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter(NOTICE_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        if handled_elsewhere(logging.getLogger(record.name), record.levelno, self):
            return
        try:
            stream = sys.stderr
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:  # noqa: BLE001 - logging's rule: a failing handler reports, never raises
            self.handleError(record)


def handled_elsewhere(logger: logging.Logger, level: int, own: logging.Handler) -> bool:
    """Whether a handler other than `own` receives records of `level` logged on `logger`
    (walking up the tree as ``Logger.callHandlers`` does; a ``NullHandler`` counts: it is how a
    library or an application says "not on stderr")."""
    current: logging.Logger | None = logger
    while current is not None:
        if any(handler is not own and level >= handler.level for handler in current.handlers):
            return True
        if not current.propagate:
            return False
        current = current.parent
    return False


_HANDLER = FallbackHandler()


def notice_logger(name: str) -> logging.Logger:
    """The logger `name`, made to show its INFO lines on stderr when logging is not configured.

    Its level is set to INFO unless the application set one already; the shared fallback
    handler is attached once.
    """
    logger = logging.getLogger(name)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    if _HANDLER not in logger.handlers:
        logger.addHandler(_HANDLER)
    return logger
