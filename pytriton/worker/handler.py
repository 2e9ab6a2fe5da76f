"""One handler thread per model instance: receive a batch, run the callable, send the responses.

The thread owns its ZeroMQ ROUTER socket, its output arena and its reader of the proxy's input
arena, so the hot path takes no lock and hands nothing to another thread.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import zmq

from pytriton.exceptions import PyTritonUnrecoverableError
from pytriton.ipc import codec, protocol
from pytriton.ipc.shm import Arena, SegmentReader
from pytriton.worker.context import TritonContext, set_current_context
from pytriton.worker.request import Request
from pytriton.worker.responses import shape_response

logger = logging.getLogger("pytriton.worker")

_POLL_MS = 100


class InstanceHandler:
    """Serves model instance `instance` of one model with one inference callable.

    Args:
        context: the model served (name, version, tensors, config).
        infer_func: the user's callable for this instance.
        endpoint: the ZeroMQ endpoint to bind (see `protocol.instance_endpoint`).
        instance: the instance number.
        shm_prefix: prefix of this model's shared-memory segments.
        strict: validate output dtypes and shapes.
        zmq_context: the process's ZeroMQ context.
        on_unrecoverable: called (from this thread) after a callable raised
            `PyTritonUnrecoverableError` and its requesters got their errors.
    """

    def __init__(
        self,
        *,
        context: TritonContext,
        infer_func: Callable[[List[Request]], Any],
        endpoint: str,
        instance: int,
        shm_prefix: str,
        strict: bool,
        zmq_context: zmq.Context[zmq.Socket[bytes]],
        on_unrecoverable: Callable[[str], None],
    ) -> None:
        self._context = context
        self._infer_func = infer_func
        self._instance = instance
        self._strict = strict
        self._on_unrecoverable = on_unrecoverable
        self._arena = Arena(lambda generation: protocol.segment_name(shm_prefix, instance, "out", generation))
        self._reader = SegmentReader()
        self._bytes_inputs = {t.name: np.dtype(t.dtype).kind for t in context.inputs if np.dtype(t.dtype).kind == "S"}
        self._socket = zmq_context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.RCVTIMEO, _POLL_MS)
        self._socket.bind(endpoint)
        self._socket_path = protocol.ipc_socket_path(endpoint)
        if self._socket_path is not None:
            # ZeroMQ creates the socket file with the process umask; only this user may connect.
            os.chmod(self._socket_path, 0o600)
        self._stop = threading.Event()
        self._released = False
        self._thread = threading.Thread(
            target=self._serve, name=f"pytriton-{context.model_name}-{instance}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Stop serving and release the socket and shared memory.

        Returns:
            False when the thread is still inside the callable after `timeout_s`.
        """
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        if self._thread.is_alive():
            return False
        if not self._released:
            self._released = True
            self._release()
        return True

    def _release(self) -> None:
        self._socket.close(linger=0)
        self._arena.close()
        self._reader.close()
        if self._socket_path is not None:
            try:
                os.unlink(self._socket_path)
            except FileNotFoundError:
                pass

    def _serve(self) -> None:
        set_current_context(self._context)
        socket = self._socket
        while not self._stop.is_set():
            try:
                identity, *frames = socket.recv_multipart()
            except zmq.Again:
                continue  # the receive timeout lets the loop see stop()
            except zmq.ContextTerminated:
                return
            try:
                message, payload = protocol.decode(frames)
            except Exception:
                logger.exception("Model '%s': dropped an unreadable message", self._context.model_name)
                continue
            if isinstance(message, protocol.Hello):
                socket.send_multipart([identity, *protocol.encode(self._welcome(message))])
            elif isinstance(message, protocol.InferBatch):
                try:
                    result, out_frames = self._infer(message, payload)
                except Exception as exc:  # a bug of ours must not leave requesters waiting
                    logger.exception("Model '%s': the worker failed to process a batch", self._context.model_name)
                    error = f"Model '{self._context.model_name}': internal error in the pytriton worker: {exc}"
                    errors = (error,) * len(message.parameters)
                    result, out_frames = protocol.BatchResult(message.batch_id, errors, (), ""), []
                if result.unrecoverable:  # before the reply, so is_alive() is false once a client sees it
                    self._on_unrecoverable(self._context.model_name)
                socket.send_multipart([identity, *protocol.encode(result, out_frames)])

    def _welcome(self, hello: protocol.Hello) -> protocol.Welcome:
        error = None
        if hello.protocol != protocol.PROTOCOL_VERSION:
            error = (
                f"protocol mismatch: proxy speaks version {hello.protocol}, worker {protocol.PROTOCOL_VERSION}; "
                "the server and the library come from different pytriton installations"
            )
        elif hello.instance != self._instance:
            error = f"instance {hello.instance} connected to the handler of instance {self._instance}"
        logger.debug("Model '%s' instance %d: proxy pid %d connected", self._context.model_name, self._instance,
                     hello.proxy_pid)
        return protocol.Welcome(protocol.PROTOCOL_VERSION, os.getpid(), error)

    def _requests(self, batch: protocol.InferBatch, payload: Sequence[Any]) -> List[Request]:
        groups = codec.unpack(batch.columns, batch.segment, payload, self._reader, len(batch.parameters))
        requests = []
        for arrays, parameters in zip(groups, batch.parameters):
            for name in self._bytes_inputs.keys() & arrays.keys():
                arrays[name] = arrays[name].astype(np.bytes_)
            requests.append(Request(arrays, json.loads(parameters) if parameters else {}))
        return requests

    def _infer(
        self, batch: protocol.InferBatch, payload: Sequence[Any]
    ) -> Tuple[protocol.BatchResult, List[Any]]:
        model = self._context.model_name
        count = len(batch.parameters)
        unrecoverable = False
        batch_sizes: List[Optional[int]] = [None] * count
        try:
            requests = self._requests(batch, payload)
            if self._strict and self._context.config.batching:  # before the callable may change the requests
                batch_sizes = [_batch_size(request) for request in requests]
            results = self._infer_func(requests)
            if isinstance(results, (list, tuple)) and len(results) == count:
                outcomes: List[Any] = list(results)
            else:
                got = f"a {type(results).__name__} of {len(results)}" if isinstance(results, (list, tuple)) else (
                    type(results).__name__)
                error = (f"Model '{model}': the inference callable returned {got} for a batch of {count} requests; "
                         "expected a list with one mapping of output name to array per request")
                outcomes = [_Failure(error)] * count
        except PyTritonUnrecoverableError as exc:
            logger.error("Model '%s': unrecoverable error, the server shuts down", model, exc_info=True)
            outcomes = [_Failure(f"Model '{model}' failed: PyTritonUnrecoverableError: {exc}")] * count
            unrecoverable = True
        except Exception as exc:
            logger.exception("Model '%s': the inference callable raised", model)
            outcomes = [_Failure(f"Model '{model}' failed: {type(exc).__name__}: {exc}")] * count

        groups: List[Dict[str, np.ndarray]] = []
        errors: List[Optional[str]] = []
        for index, outcome in enumerate(outcomes):
            if isinstance(outcome, _Failure):
                groups.append({})
                errors.append(outcome.message)
                continue
            try:
                groups.append(shape_response(self._context, outcome, request_index=index,
                                             batch_size=batch_sizes[index], strict=self._strict))
                errors.append(None)
            except Exception as exc:  # noqa: BLE001 - one bad response fails that request only
                logger.warning("%s", exc)
                groups.append({})
                errors.append(str(exc))
        columns, segment, frames = codec.pack(groups, self._arena)
        return protocol.BatchResult(batch.batch_id, tuple(errors), columns, segment, unrecoverable), frames


class _Failure:
    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


def _batch_size(request: Request) -> Optional[int]:
    for array in request.values():
        if array.ndim:
            return int(array.shape[0])
    return None
