"""The binding surface of the two facades is written once (`pytriton.facade.base.TritonBase`): neither
facade redefines a public method, so their signatures and docstrings cannot drift apart; and the
signatures are the published ones."""

from __future__ import annotations

import inspect

import pytest

import pytriton.remote
import pytriton.triton
from pytriton.remote import RemoteTriton
from pytriton.triton import Triton

OWN_PUBLIC_METHODS = {
    Triton: {"get_access_token"},  # the token of the server it starts
    RemoteTriton: set(),
}
"""What each facade may define besides ``__init__``: what only it has."""

PUBLISHED = {
    "bind": "(self, model_name: 'str', infer_func: 'Union[InferFunc, Sequence[InferFunc]]', "
            "inputs: 'Sequence[Tensor]', outputs: 'Sequence[Tensor]', model_version: 'int' = 1, "
            "config: 'Optional[ModelConfig]' = None, strict: 'bool' = False, "
            "trace_config: 'Optional[List[str]]' = None) -> 'None'",
    "bind_ensemble": "(self, model_name: 'str', steps: 'Sequence[EnsembleStep]', "
                     "inputs: 'Optional[Sequence[str]]' = None, outputs: 'Optional[Sequence[str]]' = None, "
                     "model_version: 'int' = 1) -> 'None'",
    "unbind": "(self, model_name: 'str', model_version: 'Optional[int]' = None) -> 'None'",
    "run": "(self) -> 'None'",
    "connect": "(self) -> 'None'",
    "is_connected": "(self) -> 'bool'",
    "serve": "(self, monitoring_period_s: 'float' = 1.0) -> 'None'",
    "is_alive": "(self) -> 'bool'",
    "stop": "(self) -> 'bool'",
}
"""The shared methods' signatures (the published PyTriton's parameters, with pytriton's additions
`strict`'s type, `trace_config`, `bind_ensemble`, `unbind`)."""


def _own_public_methods(cls: type) -> set:
    return {name for name, value in vars(cls).items()
            if callable(value) and (not name.startswith("_") or name in ("__enter__", "__exit__"))}


@pytest.mark.parametrize("facade", [Triton, RemoteTriton], ids=lambda cls: cls.__name__)
def test_a_facade_redefines_no_public_method_of_the_surface(facade):
    assert _own_public_methods(facade) == OWN_PUBLIC_METHODS[facade]


def test_both_facades_have_one_surface():
    assert Triton.__mro__[1] is RemoteTriton.__mro__[1]
    base = Triton.__mro__[1]
    for name in [*PUBLISHED, "bind_chat", "bind_embeddings", "__enter__", "__exit__"]:
        assert getattr(Triton, name) is getattr(RemoteTriton, name) is getattr(base, name), name
        assert inspect.getdoc(getattr(base, name)), f"{name} says what it does"
    assert not inspect.isabstract(Triton) and not inspect.isabstract(RemoteTriton)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
@pytest.mark.parametrize("facade", [Triton, RemoteTriton], ids=lambda cls: cls.__name__)
def test_the_signatures_are_the_published_ones(facade, name):
    assert str(inspect.signature(getattr(facade, name))) == PUBLISHED[name]


def test_the_published_modules_hand_on_the_same_classes():
    assert pytriton.triton.RemoteTriton is pytriton.remote.RemoteTriton
    assert pytriton.triton.Triton.__module__ == "pytriton.facade.triton"
    assert pytriton.remote.RemoteTriton.__module__ == "pytriton.facade.remote"
