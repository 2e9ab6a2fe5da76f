"""The client's exception tree hangs under the library's root."""

from __future__ import annotations

import inspect

import pytest

import pytriton.client.exceptions as client_exceptions
from pytriton.exceptions import PyTritonError

CLASSES = [
    obj
    for _, obj in inspect.getmembers(client_exceptions, inspect.isclass)
    if obj.__module__ == client_exceptions.__name__
]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_every_client_error_is_a_pytriton_error_and_drawn_in_the_tree(cls):
    assert issubclass(cls, client_exceptions.PyTritonClientError)
    assert issubclass(cls, PyTritonError)
    assert cls.__name__ in client_exceptions.__doc__


def test_message_is_kept():
    exc = client_exceptions.PyTritonClientInferenceServerError("server said no")
    assert str(exc) == "server said no"
    assert exc.message == "server said no"
