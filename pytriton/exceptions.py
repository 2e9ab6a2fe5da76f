"""The one exception tree of the library.

::

    PyTritonError                          root of everything this library raises
    ├── PyTritonValidationError            a value given to the API is wrong (names the field)
    │   └── PyTritonBadParameterError      an argument of a call is out of range or of a wrong kind
    ├── PyTritonModelConfigError           a model declaration cannot become a Triton model
    ├── PyTritonInvalidOperationError      a call that the current state does not allow
    ├── PyTritonServerError                the tritonserver process cannot start, serve or stop
    │   └── PyTritonServerStartupError     it could not start (port in use, binary or libpython missing)
    ├── PyTritonUnrecoverableError         raised by a callable: the server shuts down
    └── pytriton.client.exceptions.PyTritonClientError  (client side, see that module)
"""


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


class PyTritonUnrecoverableError(PyTritonError):
    """Raise from an inference callable when no further inference is possible.

    The requests of that call receive an error and the server shuts down: `Triton.serve()`
    returns and `Triton.is_alive()` turns false, so an orchestrator can restart the process.
    """
