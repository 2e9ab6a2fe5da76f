"""Warning categories of the client side, under the names published PyTriton exports here.

Code written for the published clients filters these categories (``warnings.filterwarnings(
"ignore", category=NotSupportedTimeoutWarning)``); the names must import for that code to run.
"""


class PyTritonWarning(UserWarning):
    """Root of the warnings the clients issue."""


class NotSupportedTimeoutWarning(PyTritonWarning):
    """A timeout was given that the chosen protocol cannot apply.

    Published PyTriton issues it when a gRPC client is created, because ``tritonclient.grpc``
    applied its network timeout only to inference calls. This library's clients pass a deadline
    to every gRPC call, so they have no such case and do not issue it.
    """
