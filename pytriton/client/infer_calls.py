"""The published inference calls, ``infer_sample`` and ``infer_batch``, written once for every client.

Every client of one model takes the same arguments for them; what differs is what a request
becomes: the outputs (``ModelClient``), a coroutine of them (``AsyncioModelClient``), a
``concurrent.futures.Future`` (``FuturesModelClient``), or an iterator of the responses'
outputs (``DecoupledModelClient``, and an async one for ``AsyncioDecoupledModelClient``).
`InferCalls` declares the two calls and checks what needs no model configuration; a client
says what a request becomes in its `InferCalls._request`.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import inspect
import types
import typing
from collections.abc import Mapping
from typing import Any, Callable, Dict, ForwardRef, Generic, Tuple, TypeVar

import numpy as np

from pytriton.client._args import priority_arg, sequence_args

_Answer = TypeVar("_Answer")


@dataclasses.dataclass(frozen=True)
class InferCall:
    """One ``infer_sample`` or ``infer_batch`` call, as the user made it (its sequence checked).

    Attributes:
        sample: True for ``infer_sample`` (no batch axis), False for ``infer_batch``.
        inputs: the positional input arrays.
        named_inputs: the input arrays given by name.
        parameters: the custom request parameters, unchecked.
        headers: the extra HTTP headers or gRPC metadata, unchecked.
        sequence: tritonclient's sequence keywords (`pytriton.client._args.sequence_args`).
        priority: the request's priority level (checked), None for the client's.
    """

    sample: bool
    inputs: Tuple[np.ndarray, ...]
    named_inputs: Dict[str, np.ndarray]
    parameters: Mapping[str, Any] | None
    headers: Mapping[str, str] | None
    sequence: Dict[str, Any]
    priority: int | None = None


def call_priority(priority: Any, named_inputs: Dict[str, np.ndarray]) -> int | None:
    """A call's ``priority`` keyword, checked; an array there is an input of that name (code written
    for the published clients passes a model's input ``priority`` by name), moved to `named_inputs`."""
    if isinstance(priority, np.ndarray):
        named_inputs["priority"] = priority
        return None
    return None if priority is None else priority_arg("priority", priority)


def _awaited(call: Callable[..., Any], result: Any) -> Callable[..., Any]:
    """`call`, which returns an awaitable, as a coroutine function returning `result`.

    The asyncio clients' calls are published as ``async def``: ``inspect.iscoroutinefunction``
    says so, and a wrong argument raises where the call is awaited, not where it is made.
    """

    async def awaited(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await call(self, *args, **kwargs)

    functools.update_wrapper(awaited, call)
    awaited.__annotations__ = {**call.__annotations__, "return": result}
    awaited.__signature__ = inspect.signature(call).replace(return_annotation=result)  # type: ignore[attr-defined]
    return awaited


class InferCalls(Generic[_Answer]):
    """``infer_sample`` and ``infer_batch``, answering as the client that inherits them does.

    Each client class gets its own copy of the two methods (`__init_subclass__`), named after
    it and annotated with what it returns, so that the API reference, ``help()`` and
    ``inspect.signature`` show them on the client itself, as if written there.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        answer = next((typing.get_args(base)[0] for base in cls.__dict__.get("__orig_bases__", ())
                       if typing.get_origin(base) is InferCalls), None)
        if answer is None:
            return  # a subclass of a client: it inherits its client's copies
        for name in ("infer_sample", "infer_batch"):
            if name in cls.__dict__:
                continue
            shared = getattr(InferCalls, name)
            own = types.FunctionType(shared.__code__, shared.__globals__, name, shared.__defaults__,
                                     shared.__closure__)
            own.__kwdefaults__ = shared.__kwdefaults__
            own.__doc__ = shared.__doc__
            own.__module__ = cls.__module__
            own.__qualname__ = f"{cls.__qualname__}.{name}"
            own.__annotations__ = dict(shared.__annotations__)
            own.__annotations__["return"] = answer.__forward_arg__ if isinstance(answer, ForwardRef) else answer
            awaitable = typing.get_origin(answer) is collections.abc.Awaitable
            setattr(cls, name, _awaited(own, typing.get_args(answer)[0]) if awaitable else own)
        # The subscripted base has served (mypy reads it from the source): without it, tools that
        # take `__orig_bases__` for the class's bases (pdoc 16 lists them before the class itself,
        # so a base's `close` would hide the class's own) see the plain bases of `__mro__`.
        delattr(cls, "__orig_bases__")

    def infer_sample(
        self,
        *inputs: np.ndarray,
        parameters: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        sequence_id: int | str = 0,
        sequence_start: bool = False,
        sequence_end: bool = False,
        priority: int | None = None,
        **named_inputs: np.ndarray,
    ) -> _Answer:
        """Run inference on one sample (no batch axis).

        For a batching model the batch axis is added to the inputs and removed from the outputs.

        Args:
            *inputs: arrays in the order of the model's inputs.
            parameters: custom request parameters, passed to the model.
            headers: extra HTTP headers or gRPC metadata.
            sequence_id: for a sequence-batched model, the id of the sequence this request
                belongs to (an int > 0 or a str); 0 for none.
            sequence_start: this request starts the sequence.
            sequence_end: this request ends the sequence.
            priority: the request's priority level in the model's dynamic batcher
                (``DynamicBatcher(priority_levels=...)``): 1 is the highest; a waiting request of a
                higher level is served before those of lower ones. None for the client's own
                ``priority``; 0 for the model's ``default_priority_level``. A level the model does
                not have is refused (Triton would silently take the default). An array given here
                is the model's input named ``priority``, as in the published clients.
            **named_inputs: arrays by input name (not together with positional ones).

        Returns:
            Output name to array, as this client gives it: at once (``ModelClient``), to
            await (``AsyncioModelClient``), as a ``concurrent.futures.Future`` holding the
            outputs or the error (``FuturesModelClient``: send the requests of one sequence in
            order, waiting for each future), or, for a decoupled model, as an iterator of each
            response's outputs in arrival order that ends after the model's final response
            (``DecoupledModelClient`` sends the request at once; ``AsyncioDecoupledModelClient``
            gives an async iterator that sends it on its first step). Leaving a stream's
            iteration early (a ``break``, or closing the iterator) cancels the request.

        Raises:
            PyTritonClientValueError: inputs are given both ways or are not arrays, a wrong
                argument (a priority level the model does not have included), an input HTTP
                streaming cannot carry, or (``DecoupledModelClient``) the previous stream is still
                open.
            PyTritonClientTimeoutError: no answer (for a stream: no next response) within
                ``inference_timeout_s``.
            PyTritonClientInferenceServerError: the server refused or failed the request.
            PyTritonClientModelUnavailableError: the model is unknown or the server unreachable.
            PyTritonClientDecoupledMismatchError: a decoupled model and a one-response client, or
                the other way round.
            PyTritonClientClosedError: the client was closed (``FuturesModelClient``: also
                ``PyTritonClientQueueFullError`` when its queue is full and it must not block).
        """
        level = call_priority(priority, named_inputs)
        return self._request(InferCall(True, inputs, named_inputs, parameters, headers,
                                       sequence_args(sequence_id, sequence_start, sequence_end), level))

    def infer_batch(
        self,
        *inputs: np.ndarray,
        parameters: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        sequence_id: int | str = 0,
        sequence_start: bool = False,
        sequence_end: bool = False,
        priority: int | None = None,
        **named_inputs: np.ndarray,
    ) -> _Answer:
        """Run inference on a batch (the first axis of every input).

        The batch must not exceed the model's ``max_batch_size``; for larger inputs use
        ``FuturesModelClient.infer_batch_chunked`` (in asyncio code, ``AsyncioModelClient``'s).

        Args:
            *inputs: arrays in the order of the model's inputs.
            parameters, headers, sequence_id, sequence_start, sequence_end, priority: as for
                :meth:`infer_sample`.
            **named_inputs: arrays by input name (not together with positional ones).

        Returns:
            Output name to array, batch axis included, given as :meth:`infer_sample` gives it.

        Raises:
            PyTritonClientModelDoesntSupportBatchingError: the model does not batch.
            PyTritonClientValueError, PyTritonClientTimeoutError, PyTritonClientInferenceServerError,
            PyTritonClientModelUnavailableError, PyTritonClientDecoupledMismatchError,
            PyTritonClientClosedError: as for :meth:`infer_sample`.
        """
        level = call_priority(priority, named_inputs)
        return self._request(InferCall(False, inputs, named_inputs, parameters, headers,
                                       sequence_args(sequence_id, sequence_start, sequence_end), level))

    def _request(self, call: InferCall) -> _Answer:
        """What `call` becomes for this client."""
        raise NotImplementedError(f"{type(self).__name__} does not say what a request becomes")
