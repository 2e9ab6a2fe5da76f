"""The one exception tree of the library.

::

    PyTritonError                          root of everything this library raises
    ├── PyTritonValidationError            a value given to the API is wrong (names the field)
    │   └── PyTritonBadParameterError      an argument of a call is out of range or of a wrong kind
    ├── PyTritonModelConfigError           a model declaration cannot become a Triton model
    ├── PyTritonInvalidOperationError      a call that the current state does not allow
    ├── PyTritonServerError                the tritonserver process cannot start, serve or stop
    │   ├── PyTritonServerStartupError     it could not start (port in use, binary or libpython missing)
    │   ├── PyTritonServerCrashedError     it died while serving (killed, crashed); carries its exit status
    │   ├── PyTritonModelRestartLimitError a model's instances kept dying; the model was given up
    │   └── PyTritonModelHangError         a callable stuck past hang_timeout_s on a thread; the server stopped
    ├── PyTritonUnrecoverableError         raised by a callable: the server shuts down
    ├── PyTritonRuntimeError               an error that fits none of the branches above
    └── pytriton.client.exceptions.PyTritonClientError  (client side, see that module)
"""


from typing import Optional


class PyTritonError(Exception):
    """Root of every error raised by pytriton."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message


class PyTritonValidationError(PyTritonError):
    """A value given to the API is invalid; the message names the field and what is expected."""


class PyTritonBadParameterError(PyTritonValidationError):
    """An argument of a call is out of range or of the wrong kind."""


class PyTritonModelConfigError(PyTritonError):
    """A model declaration cannot be turned into a valid Triton model configuration."""


class PyTritonInvalidOperationError(PyTritonError):
    """The call is not allowed in the current state (e.g. binding a name twice)."""


class PyTritonServerError(PyTritonError):
    """The tritonserver process could not be started, failed while serving, or failed to stop."""


class PyTritonServerStartupError(PyTritonServerError):
    """The tritonserver process could not start: the message names the cause and the remedy."""


class PyTritonServerCrashedError(PyTritonServerError):
    """The tritonserver process died while serving (killed, crashed, out of memory).

    Raised by `Triton.serve()` (so a script exits non-zero and a supervisor sees a crash, not a
    clean stop), and by the next call on a `Triton` started with `run()`.

    Attributes:
        returncode: the server's exit code; negative: the number of the signal that killed it.
        log_tail: the last lines the server printed.
    """

    def __init__(self, message: str = "", returncode: Optional[int] = None, log_tail: str = "") -> None:
        super().__init__(message)
        self.returncode = returncode
        self.log_tail = log_tail


class PyTritonModelRestartLimitError(PyTritonServerError):
    """A model's instances died more often than its restart budget allows (a crash loop).

    pytriton restarts a model whose Python-backend stub died; when that happens more than
    ``ModelConfig.max_restarts`` times within ``ModelConfig.restart_window_s`` the model is given
    up, the server stops and `Triton.serve()` raises this.
    """


class PyTritonModelHangError(PyTritonServerError):
    """A model's callable ran a batch past the model's ``ModelConfig.hang_timeout_s`` on a thread
    that nothing can free; the server was stopped, so that the process can be restarted. The
    callable's stack at that moment is in the log."""


class PyTritonUnrecoverableError(PyTritonError):
    """Raise from an inference callable when no further inference is possible.

    The requests of that call receive an error and the server shuts down: `Triton.serve()`
    returns and `Triton.is_alive()` turns false, so an orchestrator can restart the process.
    """


class PyTritonRuntimeError(PyTritonError):
    """An error that fits none of the other branches of the tree.

    Published PyTriton raises it for some misuses found while a callable runs (a decorator in the
    wrong place, a generator returned by a model that does not stream). This library reports
    those cases with the more specific classes above (`PyTritonValidationError`,
    `PyTritonInvalidOperationError`) or as an error sent to the client; the class is here so that
    code which raises or catches it keeps working.
    """
