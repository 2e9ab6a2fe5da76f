"""Errors raised by the client side of the library.

Everything the clients raise derives from :class:`PyTritonClientError`, itself a
:class:`pytriton.exceptions.PyTritonError`, so one ``except`` clause catches the whole library.
Errors of ``tritonclient``, gRPC and sockets never escape: they are translated in one place
(``pytriton.client._errors``) and kept as ``__cause__``.

::

    PyTritonError                                  pytriton.exceptions
    └── PyTritonClientError                        root of the client side
        ├── PyTritonClientValueError               a wrong argument (inputs, parameters, headers)
        │   ├── PyTritonClientInvalidUrlError      the URL cannot be parsed or its scheme is not served
        │   └── PyTritonClientDecoupledMismatchError  (*) a streaming client on a model that is not
        │                                              decoupled, or a one-response client on one that is
        ├── PyTritonClientTimeoutError             the server or model not ready in time, or no answer in time
        ├── PyTritonClientModelUnavailableError    unknown model/version, or the server cannot be reached
        ├── PyTritonClientClosedError              a call on a client after ``close()``
        ├── PyTritonClientModelDoesntSupportBatchingError  ``infer_batch`` on a model with max_batch_size 0
        ├── PyTritonClientInferenceServerError     the server refused or failed the request (its message kept)
        │   ├── PyTritonClientRequestLostError     the model instance died before answering (async
        │   │                                          callables, decoupled models); a retry is served
        │   └── PyTritonClientDecoupledMismatchError  (*) the same class, under both parents
        └── PyTritonClientQueueFullError           a queue is full (client's ``non_blocking`` queue or server's)

(*) ``PyTritonClientDecoupledMismatchError`` has two parents: it is a wrong choice of client (a
value error), and published PyTriton reports the same mismatch as a
``PyTritonClientInferenceServerError``, so code written for it catches ours unchanged.
"""

from pytriton.exceptions import PyTritonError


class PyTritonClientError(PyTritonError):
    """Root of every error raised by the clients."""


class PyTritonClientValueError(PyTritonClientError):
    """An argument given to a client is wrong; the message names it and what is allowed."""


class PyTritonClientInvalidUrlError(PyTritonClientValueError):
    """The server URL cannot be parsed or uses a scheme the clients do not speak."""


class PyTritonClientTimeoutError(PyTritonClientError):
    """The server or the model was not ready in time, or a request got no answer in time."""


class PyTritonClientModelUnavailableError(PyTritonClientError):
    """The server does not know the model or version, or the server cannot be reached."""


class PyTritonClientClosedError(PyTritonClientError):
    """The client was closed; create a new one to send more requests."""


class PyTritonClientModelDoesntSupportBatchingError(PyTritonClientError):
    """``infer_batch`` was called for a model without batching (``max_batch_size`` 0); use ``infer_sample``."""


class PyTritonClientInferenceServerError(PyTritonClientError):
    """The server answered with an error; the message carries the server's own text."""


class PyTritonClientRequestLostError(PyTritonClientInferenceServerError):
    """The model instance serving the request died before answering it; a retry is served by its
    restarted instance. Raised for requests to async callables and decoupled models, which
    Triton itself never answers after such a death (`pytriton.ipc.lost`)."""


class PyTritonClientDecoupledMismatchError(PyTritonClientValueError, PyTritonClientInferenceServerError):
    """The client kind does not fit the model: the message names the clients to use instead.

    A decoupled model (any number of responses per request) needs ``DecoupledModelClient`` or
    ``AsyncioDecoupledModelClient``; any other model needs ``ModelClient``,
    ``FuturesModelClient`` or ``AsyncioModelClient``. It is also a
    `PyTritonClientInferenceServerError` because published PyTriton raises that for the same
    mismatch; ``except PyTritonClientInferenceServerError`` written for it still catches this.
    """


class PyTritonClientQueueFullError(PyTritonClientError):
    """A request was refused because a queue is full (the client's bounded queue or the server's)."""
