"""The wire contract between the proxy (inside Triton's Python backend) and the worker.

One ZeroMQ DEALER (proxy, one per model instance) talks to one ROUTER (worker, one per
callable). Every message is a multipart ZeroMQ message: frame 0 is a pickled header (a
NamedTuple of this module), frame 1, when present, carries the bytes of all small tensors of
the message back to back. Large tensors travel in the sender's shared-memory arena (see
`pytriton.ipc.shm`) and the header only gives their offsets.

Both sides are processes of the same user that the library started, talking over a socket in
a 0700 workspace folder, so pickle is safe here. Headers are NamedTuples holding plain values
because pickling them costs microseconds where dataclasses cost hundreds (measured: 64-request
batch headers, 17 us against 390 us to encode).

Exchanges: `Hello`/`Welcome` once per instance at load; then per batch either `InferBatch` ->
`BatchResult` (one answer), or, for a decoupled model, `InferBatch` -> any number of
`StreamPart` -> `StreamEnd`, with `Cancel` from the proxy when every requester of the batch has
gone. Version 2 added the streaming messages; version 3 feeds a plain callable's handler from
`PIPELINE_LANES` proxies, each with its own output arena.

Names (endpoints, segments) are built by the functions at the bottom of this module, on both
sides of the process boundary.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from typing import Any, List, NamedTuple, Optional, Sequence, Tuple, Union

PROTOCOL_VERSION = 3

# Keys of the model configuration `parameters` that tell a proxy where its worker is.
PARAM_ENDPOINT = "pytriton.endpoint"
PARAM_SHM_PREFIX = "pytriton.shm_prefix"
PARAM_PROTOCOL = "pytriton.protocol"
PARAM_WORKER_PID = "pytriton.worker_pid"
PARAM_HANDSHAKE_TIMEOUT_S = "pytriton.handshake_timeout_s"
PARAM_RELAYED = "pytriton.relayed"
"""``"1"`` when the proxy answers through Triton's response senders from a relay thread (decoupled
models, and callables that are coroutines, whose batches may overlap); absent otherwise."""
PARAM_HANDLERS = "pytriton.handlers"
"""How many worker handlers (one per callable) serve the model."""

PIPELINE_LANES = 2
"""Triton instances per worker handler of a model with one plain callable. Each proxy's `execute`
blocks until its batch is answered (so Triton itself fails the batch if the stub dies), and with
two of them Triton hands the next batch to the second proxy while the callable still works on
the first: the batch is transferred and waiting when the callable is done, and each batch holds
what arrived during about one call. Models with several callables get one instance per callable
(`binding.pipeline_lanes` says why). Triton instance ``k`` of a model with ``n`` handlers is lane
``k // n`` of handler ``k % n`` (see `handler_of`)."""

DEADLINE_PARAMETER = "pytriton_deadline_ms"
"""Request parameter by which pytriton's clients send their deadline to the worker: the Unix time,
in milliseconds, after which nobody waits for the answer. Triton honours its own ``timeout``
parameter only over gRPC and only in the dynamic batcher's queue; the worker drops requests whose
deadline passed (and never shows the parameter to the callable) on both protocols. It compares
wall clocks, so the client's and the server's must agree to well within the timeouts used."""

# Tensors at or under this size travel inline in ZeroMQ frames; larger ones in shared memory.
INLINE_MAX_BYTES = 64 * 1024


class Hello(NamedTuple):
    """Proxy -> worker, once per instance at model load: checks the protocol and the peer.

    `instance` is the worker handler's number; `lane` tells the proxies of one handler apart
    (see `PIPELINE_LANES`): each has its own output arena on the worker's side.
    """

    protocol: int
    instance: int
    proxy_pid: int
    lane: int = 0


class Welcome(NamedTuple):
    """Worker -> proxy: the handshake succeeded (or `error` says why it did not)."""

    protocol: int
    worker_pid: int
    error: Optional[str] = None


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
    number of requests. `segment` names the proxy's input arena ("" when unused).
    """

    batch_id: int
    parameters: Tuple[str, ...]
    columns: Tuple[TensorColumn, ...]
    segment: str


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


class StreamEnd(NamedTuple):
    """Worker -> proxy: the callable is done with a batch; closes every stream still open.

    `errors[i]` is None for a clean end of request i's stream, else the error its requester gets
    after the responses already sent.
    """

    batch_id: int
    errors: Tuple[Optional[str], ...]
    unrecoverable: bool = False


class Cancel(NamedTuple):
    """Proxy -> worker: every requester of the batch has gone; stop producing its responses.

    The worker still answers with `StreamEnd`, which is when the proxy forgets the batch.
    """

    batch_id: int


Message = Union[Hello, Welcome, InferBatch, BatchResult, StreamPart, StreamEnd, Cancel]
_MESSAGE_TYPES = (Hello, Welcome, InferBatch, BatchResult, StreamPart, StreamEnd, Cancel)


def encode(message: Message, payload: Sequence[Any] = ()) -> List[Any]:
    """Frames of one multipart message: the pickled header, then the inline payload frame(s)."""
    return [pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL), *payload]


def decode(frames: Sequence[Any]) -> Tuple[Message, Sequence[Any]]:
    """Inverse of `encode`: the header and the payload frames."""
    message = pickle.loads(frames[0])
    if not isinstance(message, _MESSAGE_TYPES):
        raise ValueError(f"unexpected message of type {type(message).__name__} on the pytriton wire")
    return message, frames[1:]


def model_key(model_name: str, model_version: int) -> str:
    """A short, filesystem- and socket-safe key for one model version."""
    digest = hashlib.sha1(f"{model_name}\x00{model_version}".encode()).hexdigest()[:10]
    return f"m{digest}"


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


def instance_endpoint(base_endpoint: str, instance: int) -> str:
    """The ZeroMQ endpoint of the worker handler serving model instance `instance`."""
    return f"{base_endpoint}-{instance}"


def segment_name(shm_prefix: str, instance: int, direction: str, generation: int, lane: int = 0) -> str:
    """Name of a shared-memory arena: one per instance, direction and lane, renewed when it grows.

    `direction` is ``"in"`` (proxy -> worker, owned by the proxy; `instance` is then the Triton
    instance) or ``"out"`` (worker -> proxy, owned by the worker; `instance` is the handler and
    `lane` the proxy it answers). `shm_prefix` carries the server's own prefix, so two servers
    on one host never share a name and a sweep can find what a dead server left. Every name of
    one instance and direction starts with ``segment_name(prefix, instance, direction, 0)[:-1]``.
    """
    name = f"{shm_prefix}-{instance}-{direction}-{generation}"
    return f"{name}.{lane}" if lane else name


def handler_of(triton_instance: int, handlers: int) -> Tuple[int, int]:
    """The worker handler and lane that Triton instance `triton_instance` feeds, of `handlers`.

    Lane-major: instances ``0 .. handlers-1`` are lane 0 of each handler, the next ones lane 1.
    """
    lane, handler = divmod(triton_instance, handlers)
    return handler, lane


def triton_instance(handler: int, lane: int, handlers: int) -> int:
    """Inverse of `handler_of`."""
    return lane * handlers + handler


def instance_index(model_instance_name: str) -> int:
    """The instance number from Triton's instance name (``<group>_<k>``)."""
    _, _, suffix = model_instance_name.rpartition("_")
    if not suffix.isdigit():
        raise ValueError(f"cannot read an instance number from Triton instance name {model_instance_name!r}")
    return int(suffix)
