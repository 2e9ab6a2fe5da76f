"""What an inference callable receives (one `Request` per client request of a batch), and the
`Response` it may answer each one with.

A `Request` is a dict of input names to numpy arrays (so ``lambda requests: requests`` is a
valid identity model), plus the request's parameters. It is a real ``dict`` because the
decorators and callables touch it for every request of every batch: a mapping implemented in
Python costs several times more per access. A `Response` is the same kind of dict, of output
names to arrays; a plain dict serves as well, the class exists for code written against
``pytriton.proxy.types.Response``.

Numeric input arrays are read-only views on the proxy's message or shared memory; they are
valid while the callable runs. Copy an array (``array.copy()``) to keep it beyond the call.

``request.is_cancelled()`` while the callable runs reads the proxy's `Cancel` messages on
demand (`CancelProbe`): while a batch takes longer than a tenth of a second, the proxy looks
whether its requests were cancelled by their clients (a closed connection, a cancelled gRPC
call) and sends the worker their positions. Nobody reads the channel while the handler thread
runs the callable, so the callable's own question reads it, at most every `_READ_EVERY_S` (a
loop may ask as often as it likes), keeping any other message for later. One probe per handler:
a handler serves one batch at a time.
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any, Callable, ContextManager, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union

import numpy as np

from pytriton.ipc.protocol import SEQUENCE_END as _SEQUENCE_END
from pytriton.ipc.protocol import SEQUENCE_START as _SEQUENCE_START
from pytriton.ipc.protocol import InferBatch
from pytriton.worker.context import current_context


class _Tensors(Dict[str, np.ndarray]):
    """A dict of tensor name -> array that is also reachable as ``.data``.

    Published PyTriton wraps the dict in a ``data`` attribute; here the object is the dict, so
    ``x["name"]`` and ``x.data["name"]`` are one lookup of the same entry.
    """

    __slots__ = ()

    @property
    def data(self) -> Dict[str, np.ndarray]:
        """The tensors: the object itself, kept for code written against ``.data``."""
        return self

    @data.setter
    def data(self, tensors: Mapping[str, np.ndarray]) -> None:
        # Replacing `.data` replaces the entries: the object is its own data.
        if tensors is not self:
            self.clear()
            self.update(tensors)


class Request(_Tensors):
    """One inference request: input name -> array (with the batch axis), and its parameters.

    A request to a sequence-batched model (``ModelConfig(batcher=SequenceBatcher(...))``) also
    tells its sequence: `sequence_id` (an int or a str, as the client sent it), and whether it
    starts (`sequence_start`) or ends (`sequence_end`) that sequence. Other requests read None,
    False and False.
    """

    __slots__ = ("parameters", "_sequence", "_requested", "_probe", "_origin", "_deadline_ms", "_tracing")
    # Set only for requests that carry them (a slot left unset costs the others nothing).
    _sequence: Tuple[Union[int, str], int]
    _requested: Tuple[str, ...]
    _probe: Any  # the CancelProbe of the batch
    _origin: Any  # the request a decorator rebuilt this one from
    _deadline_ms: float  # when its pytriton client stops waiting (Unix ms)
    _tracing: Tuple[Any, Any]  # its OpenTelemetry span and the tracer that made it (sampled requests only)

    def __init__(self, data: Mapping[str, np.ndarray], parameters: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(data)
        self.parameters: Dict[str, Any] = parameters if parameters is not None else {}

    def is_cancelled(self) -> bool:
        """Whether the client stopped waiting for this request: it cancelled its call (gRPC), or
        the inference timeout of a pytriton client passed (over HTTP and gRPC). A long
        computation may stop early, as nobody will read its answer.

        Live while the callable runs, for callables that return their answers (plain or under
        decorators): a cancellation is learnt within about a tenth of a second. Async callables
        and streams are cancelled for you instead (see Streaming).
        """
        deadline_ms = getattr(self, "_deadline_ms", None)
        if deadline_ms is not None and time.time() * 1000 > deadline_ms:
            return True  # its pytriton client's inference timeout passed: it stopped waiting
        probe = getattr(self, "_probe", None)
        if probe is None:
            origin = getattr(self, "_origin", None)
            return bool(origin is not None and origin.is_cancelled())
        return bool(probe.is_cancelled(self))

    @property
    def requested_output_names(self) -> Optional[List[str]]:
        """The outputs this request's client asked for: every declared output when it named none
        (None outside a served model). A callable may skip computing the others; their entries
        may be left out of its answer, and pytriton sends only those asked for."""
        requested = getattr(self, "_requested", None)
        if requested is not None:
            return list(requested)
        context = current_context()
        return None if context is None else list(context.output_names)

    @property
    def sequence_id(self) -> Union[int, str, None]:
        """The id of the sequence this request belongs to; None outside a sequence model."""
        sequence = getattr(self, "_sequence", None)
        return None if sequence is None else sequence[0]

    @property
    def sequence_start(self) -> bool:
        """Whether this request starts its sequence (the callable should reset its state)."""
        sequence = getattr(self, "_sequence", None)
        return sequence is not None and bool(sequence[1] & _SEQUENCE_START)

    @property
    def sequence_end(self) -> bool:
        """Whether this request ends its sequence (the callable may drop its state after it)."""
        sequence = getattr(self, "_sequence", None)
        return sequence is not None and bool(sequence[1] & _SEQUENCE_END)

    @property
    def span(self) -> Any:
        """This request's OpenTelemetry span (the ``callable`` span of its trace), or None.

        Set when the server traces with OpenTelemetry (``TritonConfig(trace_config=
        ["mode=opentelemetry", ...])``), Triton sampled this request and the OpenTelemetry SDK is
        installed (``pytriton[telemetry]``). Use it as the parent of your own spans:
        ``with opentelemetry.trace.use_span(request.span, end_on_exit=False): ...``.
        """
        tracing = getattr(self, "_tracing", None)
        return None if tracing is None else tracing[0]

    def traced_span(self, span_name: str) -> ContextManager[Any]:
        """A context manager giving a span named `span_name` below this request's `span`, current
        while the block runs (so spans started inside nest below it too), exported with the
        request's trace. When the request has no span it gives None and records nothing, so the
        same code runs with tracing on or off."""
        from pytriton.worker.tracing import child_span

        return child_span(getattr(self, "_tracing", None), span_name)

    def __repr__(self) -> str:
        return f"Request(data={dict.__repr__(self)}, parameters={self.parameters!r})"


def rebuilt(old: Any, data: Mapping[str, np.ndarray]) -> Request:
    """A `Request` of `data` that keeps what `old` (a `Request` or any mapping) says besides its
    inputs: parameters, sequence, requested outputs and span. For decorators that hand the callable changed inputs."""
    request = Request(data, getattr(old, "parameters", None))
    for slot in ("_sequence", "_requested", "_tracing"):
        value = getattr(old, slot, None)
        if value is not None:
            setattr(request, slot, value)
    if isinstance(old, Request):
        request._origin = old  # its cancellation is the old one's
    return request


class Response(_Tensors):
    """One request's answer: output name -> array. Any dict of the same shape is accepted too."""

    __slots__ = ()

    def __init__(self, data: Mapping[str, np.ndarray]) -> None:
        super().__init__(data)

    def __repr__(self) -> str:
        return f"Response(data={dict.__repr__(self)})"


class Requests(List[Request]):
    """The list of requests the worker hands a callable: a plain list, plus the whole batch.

    When every request carries the same inputs, each one numeric array of one trailing shape,
    the wire holds each input of the batch as one contiguous run: `whole` maps each input name
    to one read-only array of every request's rows back to back, and `rows` gives each
    request's count. `@batch` takes those instead of concatenating per-request arrays (one copy
    and no Python per request), after `whole_inputs` checks that nobody replaced a request or
    an array in the list meanwhile.
    """

    __slots__ = ("whole", "rows", "_arrays")

    def __init__(self, requests: Sequence[Request], whole: Optional[Dict[str, np.ndarray]] = None,
                 rows: Sequence[int] = (), arrays: Sequence[Dict[str, np.ndarray]] = ()) -> None:
        """`arrays`: each request's input arrays as it was built, kept to notice changes."""
        super().__init__(requests)
        self.whole = whole
        self.rows = list(rows)
        self._arrays = arrays

    @classmethod
    def of_batch(cls, batch: InferBatch, groups: Optional[List[Dict[str, np.ndarray]]],
                 whole: Optional[Dict[str, np.ndarray]] = None) -> Requests:
        """The requests of the wire's `batch`: each one's input arrays (`groups`, one dict per
        request) or, when the batch's inputs were gathered into one array each (`whole`), views of
        its rows of those; its parameters (JSON text on the wire, "" for none), its sequence and
        the outputs it asked for. Built here, in one call, as the callable will read them."""
        rows: List[int] = []
        if whole is not None:  # each request's arrays: views of the whole ones' rows
            rows = [shape[0] for shape in batch.columns[0].shapes]  # type: ignore[index]  # no None: gathered
            ends = list(itertools.accumulate(rows))
            views = [[array[end - size:end] for size, end in zip(rows, ends)] for array in whole.values()]
            groups = [dict(zip(whole, arrays)) for arrays in zip(*views)]
        assert groups is not None, "groups or whole"
        requests = [Request(arrays, json.loads(parameters) if parameters else {})
                    for arrays, parameters in zip(groups, batch.parameters)]
        for request, (sequence_id, flags) in zip(requests, batch.sequences):
            request._sequence = (sequence_id, flags)  # left unset (a slot never assigned) for stateless requests
        for request, names in zip(requests, batch.requested):
            if names:
                request._requested = names
        return cls(requests) if whole is None else cls(requests, whole, rows, groups)

    def whole_inputs(self) -> Optional[Dict[str, np.ndarray]]:
        """`whole`, if every request still holds exactly the arrays it came with (else None)."""
        if self.whole is None or len(self) != len(self._arrays):
            return None
        for request, arrays in zip(self, self._arrays):
            if len(request) != len(arrays):
                return None
            for name, array in arrays.items():
                if request.get(name) is not array:
                    return None
        return self.whole


class BatchResponses(List[Dict[str, np.ndarray]]):
    """What `@batch` returns: one response per request (views of the whole outputs), plus the
    whole outputs themselves, so the worker sends each output as one buffer (see
    `pytriton.worker.responses.batch_result`) after `whole_outputs` checks nothing was changed.
    """

    __slots__ = ("whole", "rows", "_views")

    def __init__(self, whole: Dict[str, np.ndarray], rows: Sequence[int]) -> None:
        """One response per group of `rows`, each holding views of the `whole` outputs' rows."""
        self.whole = whole
        self.rows = list(rows)
        ends = list(itertools.accumulate(rows))
        self._views = {name: [array[end - size:end] for size, end in zip(rows, ends)] for name, array in whole.items()}
        names = list(self._views)
        super().__init__(dict(zip(names, views)) for views in zip(*self._views.values()))
        if not names:
            self.extend({} for _ in rows)

    def whole_outputs(self) -> Optional[Dict[str, np.ndarray]]:
        """`whole`, if every response is still the one `@batch` made, holding its own views (else None)."""
        views = self._views
        if len(self) != len(self.rows):
            return None
        for index, response in enumerate(self):
            if len(response) != len(views):
                return None
            for name, column in views.items():
                if response.get(name) is not column[index]:
                    return None
        return self.whole


_READ_EVERY_S = 0.01

CancelReader = Callable[[], Optional[Tuple[int, ...]]]
"""Reads the channel now: the positions of the current batch cancelled so far (``()`` for all),
or None when nothing new arrived."""


class CancelProbe:
    """What the requests of the batch being served learn about their cancellation."""

    __slots__ = ("requests", "_reader", "_cancelled", "_all", "_next_read")

    def __init__(self) -> None:
        self.requests: Sequence[Any] = ()
        self._reader: Optional[CancelReader] = None
        self._cancelled: Set[int] = set()
        self._all = False
        self._next_read = 0.0

    def begin(self, requests: Sequence[Any], reader: Optional[CancelReader]) -> None:
        """A new batch: its requests, which ask this probe from now on, and how to read its
        cancellations (None: never learnt)."""
        for request in requests:
            request._probe = self
        self.requests = requests
        self._reader = reader
        self._cancelled = set()
        self._all = False
        self._next_read = 0.0

    def end(self) -> None:
        """The batch is answered: let go of its requests, whose arrays may view shared memory
        that the handler unmaps once idle."""
        if self.requests or self._reader is not None:  # a whole batch began none: nothing to let go
            self.begin((), None)

    def is_cancelled(self, request: Any) -> bool:
        """Whether `request` (or the request it was rebuilt from) was cancelled by its client."""
        self._refresh()
        if self._all:
            return True
        if not self._cancelled:
            return False
        position = self._position(request)
        return position is not None and position in self._cancelled

    def all_cancelled(self) -> bool:
        """Whether every request of the batch was cancelled: nobody waits for the answer."""
        self._refresh()
        return self._all or (bool(self.requests) and len(self._cancelled) >= len(self.requests))

    def _refresh(self) -> None:
        if self._reader is None or self._all:
            return
        now = time.monotonic()
        if now < self._next_read:
            return
        self._next_read = now + _READ_EVERY_S
        positions = self._reader()
        if positions is None:
            return
        if not positions:
            self._all = True
        self._cancelled.update(positions)

    def _position(self, request: Any) -> Optional[int]:
        while request is not None:
            for position, candidate in enumerate(self.requests):
                if candidate is request:
                    return position
            request = getattr(request, "_origin", None)  # rebuilt by a decorator from this one
        return None
