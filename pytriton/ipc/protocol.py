"""The wire contract between the proxy (inside Triton's Python backend) and the worker.

Two channels join a proxy (one per Triton instance) and a worker handler (one per callable):

- the control channel, a ZeroMQ DEALER (proxy) and ROUTER (handler): `Hello` and `Welcome`
  once per proxy at load and after a reconnection. The welcome names the data socket;
- the data channel, a Unix ``SOCK_SEQPACKET`` connection (`pytriton.ipc.channel`) that the
  proxy opens to the handler's data socket after the welcome: every batch and answer.

pytriton's own Triton backend (``pytriton/backend/``, C) has no ZeroMQ: it connects to the data
socket named in `PARAM_DATA_SOCKETS` and greets there, its `Hello` answered by a `Welcome` on the
same connection. Its C mirror of this module's constants is ``pytriton/backend/wire.h``, which
``tests/unit/backend/test_wire_mirror.py`` holds to this file.

A message is a header (encoded here) and a payload: the bytes of all small tensors of the
message back to back. Large tensors travel in the sender's shared-memory arena (see
`pytriton.ipc.shm`) and the header only gives their offsets.

Headers are NamedTuples of plain values, encoded with `marshal` as a tuple of a kind number and
the fields: both sides are processes of the same user that the library started, talking over
sockets in a 0700 workspace folder, and `marshal` costs a fifth of `pickle` (0.4 us against
2.6 us for a one-request batch header, measured here), which matters on every batch.

Exchanges on the data channel: per batch either `InferBatch` -> `BatchResult` (one answer), or,
for a decoupled model, `InferBatch` -> any number of `StreamPart` -> `StreamEnd`, with `Cancel`
from the proxy when every requester of the batch has gone. A continuous-batching model answers
a step of streams from many batches with one `StepPart`, and learns of each requester that goes
(a `Cancel` with positions). On the control channel, a proxy asks its handler for the model's
metrics (`MetricsPoll` -> `MetricsReport`) about once a second, off the batches' path. Version
11 added `StepPart` and the partial `Cancel`s. Version 8 added the greeting on the data channel
(for the backend), with the `Welcome`'s arena stem, metrics socket and greeting number. Version
6 added the metrics and the trace contexts. Version 4 moved the batches from ZeroMQ to the data
channel, added the timing stamps (`Stamp`) and fed each handler from one Triton instance
(version 3 had two, "lanes").

Names (endpoints, socket files, segments) are built by the functions at the bottom of this
module, on both sides of the process boundary.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import time
from typing import Any, List, NamedTuple, Optional, Sequence, Tuple, Union

# Names the clients read as well: defined where the client-only distribution has them, and
# named here too, so that the proxy and the worker keep one vocabulary (`PARAM_RELAYED`: the proxy
# answers from a relay thread; `DEADLINE_PARAMETER`: a request's deadline for the worker;
# `PARAM_MULTIPLEX`: a multiplexed model's variants, which pytriton's backend routes by).
from pytriton.client_contract import DEADLINE_PARAMETER as DEADLINE_PARAMETER
from pytriton.client_contract import PARAM_MULTIPLEX as PARAM_MULTIPLEX  # routed by backend/route.c
from pytriton.client_contract import PARAM_RELAYED as PARAM_RELAYED

PROTOCOL_VERSION = 12

# Keys of the model configuration `parameters` that tell a proxy where its worker is. Every
# version of a model name shares one configuration (Triton keeps one per name), so these name the
# model, not a version: the proxy of version v finds its own worker with `version_endpoint` and
# `model_shm_prefix`, and pytriton's backend puts its version into `PARAM_DATA_SOCKETS`.
PARAM_ENDPOINT = "pytriton.endpoint"
"""The model name's endpoint (`name_endpoint`)."""
PARAM_SHM_PREFIX = "pytriton.shm_prefix"
"""The server's prefix of shared-memory segments; a version's own is `model_shm_prefix`."""
PARAM_PROTOCOL = "pytriton.protocol"
PARAM_WORKER_PID = "pytriton.worker_pid"
PARAM_HANDSHAKE_TIMEOUT_S = "pytriton.handshake_timeout_s"
PARAM_DATA_SOCKETS = "pytriton.data_sockets"
"""The data socket of each worker handler, in instance order, as a JSON list: where the backend
connects, once it put the version it serves in place of `VERSION_TOKEN` (`data_socket_patterns`)."""
PARAM_HANDLERS = "pytriton.handlers"
"""How many worker handlers (one per callable) serve the model."""
PARAM_SPIN_US = "pytriton.spin_us"
"""How long a proxy polls for its answer before it sleeps (see `pytriton.proxy.waiting`)."""
PARAM_HOLD_US = "pytriton.hold_us"
"""How long pytriton's backend holds a busy instance between batches (``backend/execute.c``)."""
PARAM_STAMPS = "pytriton.stamps"
"""``"1"`` when the proxy records the timing stamps of every batch (see `Stamp`); absent otherwise."""
PARAM_METRICS = "pytriton.metrics"
"""``"0"`` when the proxy exports no metrics to Triton's ``/metrics`` (metrics are off); absent otherwise."""
PARAM_METRICS_PERIOD_S = "pytriton.metrics_period_s"
"""How often the proxy asks its worker for the model's metrics and updates Triton's families."""
PARAM_TRACING = "pytriton.tracing"
"""``"1"`` when Triton traces with OpenTelemetry: the proxy then sends each request's trace
context (`InferBatch.traces`); absent otherwise."""
PARAM_CONTINUOUS = "pytriton.continuous"
"""For a continuous-batching model (`pytriton.worker.continuous`): how many streams one instance runs
at once. pytriton's backend hands an instance new requests only while it holds fewer than twice as
many, sends it which requesters went away (`Cancel` with positions), and answers its `StepPart`s.
Absent for every other model."""
PARAM_STOPPING = "pytriton.stopping"
"""The path of the server's stopping flag (`pytriton.ipc.stopping`); absent: nothing refused."""
PARAM_REFUSE = "pytriton.refuse"
"""``"1"`` in the configuration a stop reloads a model with (`pytriton.ipc.stopping.refusing_config`):
no worker, every request refused as retryable; absent otherwise."""
PARAM_DEVICES = "pytriton.devices"
"""The device of each instance, in instance order, as a JSON list (``ModelConfig.devices``); for
people and tools reading the configuration; neither the backend nor the proxy reads it. Absent
when the model lists no devices."""
PARAM_GATE_RELEASE = "pytriton.gate_release"
"""On pytriton's readiness gate (a worker-less model of the backend, `pytriton.server.readiness`) and
the placeholder that clears a failed load: the file whose existence releases its load."""
PARAM_INSTANCE_NAMES = "pytriton.instance_names"
"""Triton's name of each instance, in instance (worker handler) order, as a JSON list: written
where the instances are grouped by device (one instance group per device, named after it, so
Triton's instance names say the device); the backend and the proxy find their handler's number
there. Absent: instance k is Triton's ``<group>_<k>``."""

# Tensors at or under this size travel inline in ZeroMQ frames; larger ones in shared memory.
INLINE_MAX_BYTES = 64 * 1024


class Hello(NamedTuple):
    """Proxy -> worker, once per instance at model load: checks the protocol and the peer.

    `instance` is the Triton instance the proxy serves, which is the number of the worker
    handler (one per callable) it greets: each handler is fed by one Triton instance.
    """

    protocol: int
    instance: int
    proxy_pid: int


class Welcome(NamedTuple):
    """Worker -> proxy: the handshake succeeded (or `error` says why it did not).

    `data_path` is the handler's data socket, which the proxy connects to next.
    """

    protocol: int
    worker_pid: int
    error: Optional[str] = None
    data_path: str = ""
    arena_stem: str = ""
    """For a greeting on the data channel (the backend's): the names of the input arena the
    greeter may create are this stem followed by a generation number (`segment_name`)."""
    metrics_path: str = ""
    """For a greeting on the data channel: the socket where the greeter asks for the model's
    metrics (`MetricsPoll`, on a connection of its own; `metrics_socket_path`)."""
    greeting: int = 0
    """For a greeting on the data channel: which greeting of the handler this is (it counts
    them); a `MetricsPoll` says it, and only the latest greeter's polls are answered."""


class TensorColumn(NamedTuple):
    """One tensor name (and dtype) across the requests of a batch, described column-wise.

    A batch of 64 requests is described by one column per input instead of 64 objects, which
    keeps the header small and cheap to encode. Per request: its shape (None where that request
    lacks the tensor), where its bytes start, how many there are, and whether they are in the
    sender's shared-memory arena (True) or in the message's inline payload frame (False).
    `dtype` is a numpy dtype string; BYTES tensors use ``"bytes"`` and their data is the
    length-prefixed serialisation of `pytriton.ipc.codec`.
    """

    name: str
    dtype: str
    shapes: Tuple[Optional[Tuple[int, ...]], ...]
    offsets: Tuple[int, ...]
    sizes: Tuple[int, ...]
    in_shm: Tuple[bool, ...]


class InferBatch(NamedTuple):
    """Proxy -> worker: the requests Triton's batcher handed to one `execute` call.

    `parameters` holds each request's parameters as JSON text ("" if none); its length is the
    number of requests. `segment` names the proxy's input arena ("" when unused). `stamps`,
    when the model records them, holds the previous batch's complete `Stamp` record followed
    by this batch's first two stamps.
    """

    batch_id: int
    parameters: Tuple[str, ...]
    columns: Tuple[TensorColumn, ...]
    segment: str
    stamps: Tuple[int, ...] = ()
    sequences: Tuple[Tuple[Union[int, str], int], ...] = ()
    """For a sequence-batched model, each request's ``(sequence id, flags)``: Triton's
    correlation id (an int or a str, as the client sent it) and request flags (`SEQUENCE_START`,
    `SEQUENCE_END`); empty for every other model."""
    requested: Tuple[Tuple[str, ...], ...] = ()
    """When some request of the batch asked for only some of the model's outputs: per request,
    the names it asked for (``()``: all of them); empty when every request wants every output."""
    sent_ns: int = 0
    """The proxy's `time.monotonic_ns` as it sends the batch (one clock on one host): the worker
    measures from it how long the batch waited on its side of the hop before the callable ran."""
    traces: Tuple[str, ...] = ()
    """When Triton traces with OpenTelemetry: per request, its W3C ``traceparent`` ("" when the
    request is not sampled); empty otherwise."""


SEQUENCE_START = 1
"""Triton's request flag: the first request of a sequence (``TRITONSERVER_REQUEST_FLAG_SEQUENCE_START``)."""
SEQUENCE_END = 2
"""Triton's request flag: the last request of a sequence (``TRITONSERVER_REQUEST_FLAG_SEQUENCE_END``)."""


class ErrorCode:
    """Which of Triton's error codes a requester's error goes back with (`BatchResult.codes`): the
    code says whose fault it is (HTTP 500 or 400, gRPC INTERNAL or INVALID_ARGUMENT)."""

    INTERNAL = 0
    """The callable (or pytriton) failed: Triton's ``TRITONSERVER_ERROR_INTERNAL``."""
    INVALID_ARG = 1
    """The request was wrong (a variant no loader knows): ``TRITONSERVER_ERROR_INVALID_ARG``."""


class BatchResult(NamedTuple):
    """Worker -> proxy: the answer to every request of the batch, in order.

    `errors` holds, per request, None or an error message meant for that requester only.
    `unrecoverable` tells the proxy that the callable declared the model dead; the worker side
    shuts the server down.
    """

    batch_id: int
    errors: Tuple[Optional[str], ...]
    columns: Tuple[TensorColumn, ...]
    segment: str
    unrecoverable: bool = False
    stamps: Tuple[int, ...] = ()
    """The batch's stamps so far (see `Stamp`), when the model records them."""
    inputs_kept: bool = False
    """The callable kept arrays that view this batch's input arena (the whole-batch path hands
    large inputs over without a copy, `pytriton.worker.batches`): the sender must never write that
    segment again, so it gives the segment up and lays the next batch out in a new one. The kept
    arrays hold the worker's mapping of the old segment, which goes when they do."""
    codes: Tuple[int, ...] = ()
    """Per request, the `ErrorCode` of its error; empty when every error is `ErrorCode.INTERNAL`
    (the common case: no tuple to write or read)."""


class StreamPart(NamedTuple):
    """Worker -> proxy: one step of a streaming callable, a response for some requests of a batch.

    `present[i]` says whether request i gets a response in this step; where `errors[i]` is not
    None, that error ends request i's stream instead. Tensors travel inline only (never in an
    arena): the proxy may still be reading one step when the worker sends the next.
    """

    batch_id: int
    present: Tuple[bool, ...]
    errors: Tuple[Optional[str], ...]
    columns: Tuple[TensorColumn, ...]


class StepPart(NamedTuple):
    """Worker -> backend: one step of a continuous-batching model, a piece for each of its streams.

    The streams of a step came in many batches, so each piece names its stream by the batch it came
    in (`batch_ids`) and its position there (`positions`); the columns hold one entry per piece, in
    that order. `present[k]` says whether piece k has outputs; where `errors[k]` is not None, that
    error ends its stream instead; `final[k]` ends its stream after this piece (or, with no outputs,
    with the final flag alone), while the step's other streams go on. One message per step, whatever
    the number of batches its streams came in. A batch whose streams have all ended is forgotten by
    the backend without a `StreamEnd`.
    """

    batch_ids: Tuple[int, ...]
    positions: Tuple[int, ...]
    present: Tuple[bool, ...]
    errors: Tuple[Optional[str], ...]
    final: Tuple[bool, ...]
    columns: Tuple[TensorColumn, ...]


class StreamEnd(NamedTuple):
    """Worker -> proxy: the callable is done with a batch; closes every stream still open.

    `errors[i]` is None for a clean end of request i's stream, else the error its requester gets
    after the responses already sent.
    """

    batch_id: int
    errors: Tuple[Optional[str], ...]
    unrecoverable: bool = False


class Cancel(NamedTuple):
    """Proxy -> worker: requesters of the batch have gone (cancelled by their clients).

    With `requests` empty, every requester of the batch has gone: a stream stops producing its
    responses (the worker still answers with `StreamEnd`, which is when the proxy forgets the
    batch). Otherwise `requests` lists the positions of the requests cancelled so far, which a
    callable still running may learn through ``request.is_cancelled()``.
    """

    batch_id: int
    requests: Tuple[int, ...] = ()


class Stamp:
    """Where the `time.monotonic_ns` stamps of one batch are taken (indices into its record).

    Recorded when the serving process runs with ``PYTRITON_HOP_STAMPS`` set (see
    `pytriton.worker.blocking`): the proxy and the worker share one host's monotonic clock, so the
    differences are the time each stage of the hop took.
    """

    EXECUTE = 0
    """The proxy's `execute` was entered."""
    SENT = 1
    """The proxy has read the requests and sends the batch."""
    RECEIVED = 2
    """The worker has the batch."""
    DECODED = 3
    """The worker built the requests."""
    CALLED = 4
    """The callable (with its decorators) returned."""
    ANSWERED = 5
    """The worker checked and encoded the answer and sends it."""
    RESULT = 6
    """The proxy has the answer."""
    RESPONDED = 7
    """The proxy built Triton's responses and returns from `execute`."""
    COUNT = 8


class MetricsPoll(NamedTuple):
    """Proxy -> worker, on the control channel: the model's metrics, please (see `MetricsReport`).

    `proxy_pid` is the asking stub's pid: only the stub that greeted the handler last exports.
    """

    instance: int
    proxy_pid: int = 0
    greeting: int = 0
    """From the backend: the `Welcome.greeting` its instance got (0 from a proxy)."""


METRIC_FAMILY_FIELDS = ("name", "help", "kind", "buckets", "series")
"""The fields of one family in `MetricsReport.families`, in order (a plain tuple on the wire)."""
METRIC_SERIES_FIELDS = ("labels", "value")
"""The fields of one series of a family, in order (a plain tuple on the wire)."""
METRIC_LABEL_FIELDS = ("name", "value")
"""The fields of one label of a series, in order (a plain tuple on the wire)."""


class MetricsReport(NamedTuple):
    """Worker -> proxy, on the control channel: the cumulative values of the instance's metrics.

    `families` holds ``(name, help, kind, buckets, series)`` per family, `kind` one of
    ``"counter"``, ``"gauge"``, ``"histogram"``; `series` holds ``(labels, value)`` with
    `labels` a tuple of ``(name, value)`` pairs and, for a histogram, `value` the tuple
    ``(bucket counts..., sum, count)`` (counts per bucket, not cumulative; the last bucket is
    +Inf). The proxy turns the growth since its last report into Triton metric updates.
    `worker_pid` names the process that keeps the values: when it changes (a worker process
    forked anew), the values started again from zero. `superseded` (with no families) answers a
    stub that another stub of the same instance has replaced (a reload starts the new stub before
    the old one ends): two exporters would each add the same growth to the same Triton series.
    """

    families: Tuple[Tuple[str, str, str, Tuple[float, ...], Tuple[Tuple[Tuple[Tuple[str, str], ...], Any], ...]], ...]
    worker_pid: int = 0
    superseded: bool = False


Message = Union[Hello, Welcome, InferBatch, BatchResult, StreamPart, StreamEnd, Cancel, MetricsPoll, MetricsReport,
                StepPart]
_MESSAGE_TYPES: Tuple[Any, ...] = (
    Hello, Welcome, InferBatch, BatchResult, StreamPart, StreamEnd, Cancel, MetricsPoll, MetricsReport, StepPart
)
_KINDS = {message_type: kind for kind, message_type in enumerate(_MESSAGE_TYPES)}
_COLUMNS_AT = {kind: 1 + kind._fields.index("columns") for kind in _MESSAGE_TYPES if "columns" in kind._fields}
"""Where a message's columns sit in its encoded tuple (after the kind number), from its fields."""


def infer_batch_header(
    *,
    batch_id: int,
    parameters: Tuple[str, ...],
    columns: Tuple[TensorColumn, ...],
    segment: str,
    stamps: Tuple[int, ...] = (),
    sequences: Tuple[Tuple[Union[int, str], int], ...] = (),
    requested: Tuple[Tuple[str, ...], ...] = (),
    traces: Tuple[str, ...] = (),
) -> bytes:
    """The encoded header of an `InferBatch`, stamped with the time it is sent (`InferBatch.sent_ns`).

    Every sender of batches (the proxy, test drivers) builds the header here, by keyword, so a
    field added to `InferBatch` cannot shift another's place. (pytriton's backend builds the
    same tuple in C, `pytriton/backend/requests.c`, against the field order the mirror test pins.)
    """
    return encode(InferBatch(batch_id=batch_id, parameters=parameters, columns=columns, segment=segment,
                             stamps=stamps, sequences=sequences, requested=requested, sent_ns=time.monotonic_ns(),
                             traces=traces))


_MARSHAL_VERSION = 2
"""The `marshal` format the headers are written in: version 2, the last without references to
objects written before (version 3 added them), which cost a hash table per header: a fourth of
the time of `encode` (0.76 us against 1.0 us for a four-request answer, measured here). Readers
of any version read it (`marshal.loads`, and ``wire.c``'s reader, which knows both forms)."""


def encode(message: Message) -> bytes:
    """The header of one message: its kind number and fields, marshalled."""
    message_type = type(message)
    at = _COLUMNS_AT.get(message_type)
    if at is None:
        return marshal.dumps((_KINDS[message_type], *message), _MARSHAL_VERSION)
    fields = [_KINDS[message_type], *message]
    fields[at] = tuple([tuple(column) for column in fields[at]])
    return marshal.dumps(tuple(fields), _MARSHAL_VERSION)


_new_tuple = tuple.__new__
"""What a NamedTuple's ``_make`` calls, called directly: `decode` checks the lengths itself
(``_make`` is Python code, one call more per message and per column)."""
_COLUMN_FIELDS = len(TensorColumn._fields)


def decode(header: Any) -> Message:
    """Inverse of `encode` (from any bytes-like object).

    Raises:
        ValueError: the header is not one of this module's messages.
    """
    try:
        fields = marshal.loads(header)
        message_type = _MESSAGE_TYPES[fields[0]]
    except (EOFError, ValueError, TypeError, IndexError, KeyError) as exc:
        raise ValueError(f"unreadable message on the pytriton wire ({exc})") from exc
    at = _COLUMNS_AT.get(message_type)
    try:
        if at is not None:
            fields = list(fields)
            fields[at] = tuple([_new_tuple(TensorColumn, column) for column in fields[at]])
            if any(len(column) != _COLUMN_FIELDS for column in fields[at]):
                raise TypeError(f"a column has the wrong number of fields, not {_COLUMN_FIELDS}")
        message = _new_tuple(message_type, fields[1:])
    except TypeError as exc:
        raise ValueError(f"a {message_type.__name__} with the wrong fields on the pytriton wire ({exc})") from exc
    if len(message) != len(message_type._fields):
        raise ValueError(f"a {message_type.__name__} with the wrong fields on the pytriton wire ({len(message)} "
                         f"fields, not {len(message_type._fields)})")
    return message  # type: ignore[no-any-return]


def model_key(model_name: str, model_version: int) -> str:
    """A short, filesystem- and socket-safe key for one model version."""
    digest = hashlib.sha1(f"{model_name}\x00{model_version}".encode()).hexdigest()[:10]
    return f"m{digest}"


def name_key(model_name: str) -> str:
    """A short, filesystem- and socket-safe key for a model name, whatever its version."""
    digest = hashlib.sha1(f"{model_name}\x00slot".encode()).hexdigest()[:10]
    return f"n{digest}"


def name_endpoint(sockets_dir: Union[str, os.PathLike[str]], model_name: str) -> str:
    """The endpoint a model name's configuration names (`PARAM_ENDPOINT`), for all its versions:
    each version's handlers are named after it (`version_endpoint`)."""
    return ipc_endpoint(os.path.join(os.fspath(sockets_dir), name_key(model_name)))


VERSION_TOKEN = "{version}"
"""Where a data socket path in `PARAM_DATA_SOCKETS` leaves the version open (`data_socket_patterns`)."""


def version_endpoint(name_endpoint: str, model_version: Union[int, str]) -> str:
    """The ZeroMQ endpoint the handlers of version `model_version` of a name are named after,
    beside the name's endpoint: what the facade binds and what that version's proxies greet.
    The version goes into the name in digits, so that pytriton's backend, which knows the version
    it serves, finds the same path from the configuration (`data_socket_patterns`)."""
    return f"{name_endpoint}v{model_version}"


def data_socket_patterns(name_endpoint: str, instances: int) -> List[str]:
    """The data socket of each instance's handler, for `PARAM_DATA_SOCKETS`, with `VERSION_TOKEN`
    where pytriton's backend puts the version it serves: every version of a name shares one
    configuration, and an instance connects (or reconnects) to its own version's workers."""
    pattern = version_endpoint(name_endpoint, VERSION_TOKEN)
    return [instance_data_socket(pattern, index) for index in range(instances)]


def instance_data_socket(version_endpoint: str, instance: int) -> str:
    """The data socket of the handler of instance `instance` of the version at `version_endpoint`."""
    return data_socket_path(ipc_socket_path(instance_endpoint(version_endpoint, instance)) or "")


def model_shm_prefix(server_prefix: str, model_name: str, model_version: int) -> str:
    """The prefix of every shared-memory segment of one model version (`segment_name`)."""
    return f"{server_prefix}-{model_key(model_name, model_version)}"


_IPC_SCHEME = "ipc://"


def ipc_endpoint(socket_path: Union[str, os.PathLike[str]]) -> str:
    """The ZeroMQ endpoint of a Unix socket file."""
    return f"{_IPC_SCHEME}{os.fspath(socket_path)}"


def ipc_socket_path(endpoint: str) -> Optional[str]:
    """The socket file behind an ``ipc://`` endpoint (None for other transports)."""
    return endpoint[len(_IPC_SCHEME) :] if endpoint.startswith(_IPC_SCHEME) else None


def fault_trace_path(folder: str, pid: int) -> str:
    """Where stub `pid` records a fatal signal: in `folder`, the one of the worker sockets.

    tritonserver runs with SIGCHLD ignored, so a dead stub is reaped at once and leaves no exit
    status to read: the stub's proxy asks `faulthandler` to write the fatal signals it can catch
    (SIGSEGV, SIGFPE, SIGABRT, SIGBUS, SIGILL) here, and the supervisor reads it.
    """
    return os.path.join(folder, f"stub-{pid}.fault")


def inflight_ledger_path(folder: str, pid: int) -> str:
    """Where stub `pid` keeps the ids of its relayed requests not answered yet
    (`pytriton.proxy.ledger`): in `folder`, the one of the worker sockets."""
    return os.path.join(folder, f"stub-{pid}.inflight")


def instance_endpoint(base_endpoint: str, instance: int) -> str:
    """The ZeroMQ endpoint of the worker handler serving model instance `instance`."""
    return f"{base_endpoint}-{instance}"


def data_socket_path(control_socket_path: str) -> str:
    """The data socket of the handler whose control socket file is `control_socket_path`."""
    return f"{control_socket_path}.d"


def metrics_socket_path(data_socket: str) -> str:
    """Where a handler answers the backend's `MetricsPoll`, beside its data socket."""
    return f"{data_socket}.m"


def death_note_path(data_socket: str, pid: int) -> str:
    """Where the owner of worker process `pid` writes why it ended, beside the data socket it
    served: the backend, which holds that worker's requests, answers them with that cause."""
    return f"{data_socket}.ended-{pid}"


def read_death_note(data_socket: str, pid: int, wait_s: float = 0.5) -> Optional[str]:
    """Why worker process `pid` ended, as its owner wrote it (`death_note_path`), waiting up to
    `wait_s` for the note: the owner reaps its child within milliseconds of its death."""
    path = death_note_path(data_socket, pid)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with open(path, encoding="utf-8") as note:
                return note.read().strip() or None
        except OSError:
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.005)


def segment_name(shm_prefix: str, instance: int, direction: str, generation: int) -> str:
    """Name of a shared-memory arena: one per instance and direction, renewed when it grows.

    `direction` is ``"in"`` (proxy -> worker, owned by the proxy) or ``"out"`` (worker ->
    proxy, owned by the worker). `shm_prefix` carries the server's own prefix, so two servers
    on one host never share a name and a sweep can find what a dead server left. Every name of
    one instance and direction starts with ``segment_name(prefix, instance, direction, 0)[:-1]``.
    """
    return f"{shm_prefix}-{instance}-{direction}-{generation}"


def instance_index(model_instance_name: str, names: Sequence[str] = ()) -> int:
    """The instance number from Triton's instance name: its place in `names` (`PARAM_INSTANCE_NAMES`)
    when the model has them, else the k of ``<group>_<k>``."""
    if names:
        if model_instance_name not in names:
            raise ValueError(f"Triton instance name {model_instance_name!r} is not one of {list(names)!r}")
        return list(names).index(model_instance_name)
    _, _, suffix = model_instance_name.rpartition("_")
    if not suffix.isdigit():
        raise ValueError(f"cannot read an instance number from Triton instance name {model_instance_name!r}")
    return int(suffix)
