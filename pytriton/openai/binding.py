"""`bind_chat` and `bind_embeddings`: a text callable -> a model that follows the convention.

The setup step of the OpenAI-compatible API. Both facades (`Triton`, `RemoteTriton`) inherit
`OpenAIBindings`, which turns the user's callable into an ordinary pytriton callable with the
tensors of `pytriton.openai.convention` and binds it with the facade's own `bind`. Nothing
here serves HTTP: the front (`pytriton.openai.front`) finds the models by their tensors, so it
serves these and any other model that follows the convention alike.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from pytriton.decorating.continuous import ContinuousStep
from pytriton.decorating.multiplexing import multiplexed_directly
from pytriton.decorating.shaping import batch
from pytriton.exceptions import PyTritonBadParameterError
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.openai.convention import (
    CHAT_MESSAGES,
    CHAT_PARAMS,
    CHAT_PIECE,
    EMBED_DIMENSIONS,
    EMBED_INPUT,
    EMBED_OUTPUT,
)
from pytriton.openai.streams import ChatRunner, ChatSteps

ChatFunc = Callable[..., Any]
"""``chat(messages, params)``: a generator (or async generator) of pieces, str or dict; under
``@batch``, ``chat(conversations, params)`` yielding one list of pieces per step."""
EmbedFunc = Callable[..., Any]
"""``embed(texts)`` (a list of str) -> an array of shape (len(texts), dim); may be a coroutine function."""

CHAT_INPUTS = (
    Tensor(name=CHAT_MESSAGES, dtype=bytes, shape=(1,)),
    Tensor(name=CHAT_PARAMS, dtype=bytes, shape=(1,)),
)
CHAT_OUTPUTS = (Tensor(name=CHAT_PIECE, dtype=bytes, shape=(1,)),)
DEFAULT_EMBEDDINGS_BATCH = 64
DEFAULT_CONTINUOUS_STREAMS = 32
"""Conversations one instance of a ``@continuous`` chat model runs per step when `bind_chat` is given no config."""


def batched_function(infer_func: Any) -> Optional[Callable[..., Any]]:
    """The function under pytriton's ``@batch`` when `infer_func` is exactly ``@batch``-decorated, else None."""
    for candidate in (infer_func, getattr(infer_func, "__call__", None)):  # noqa: B004 - the method itself
        if getattr(candidate, "_self_wrapper", None) is batch.__wrapped__:  # type: ignore[attr-defined]
            wrapped: Callable[..., Any] = candidate.__wrapped__  # type: ignore[union-attr]
            return wrapped
    return None


def chat_config(model_name: str, config: Optional[ModelConfig]) -> ModelConfig:
    """The config of a chat model: the user's (decoupled forced on), or one conversation per call."""
    if config is None:
        return ModelConfig(batching=False, decoupled=True)
    if not isinstance(config, ModelConfig):
        raise PyTritonBadParameterError(
            f"config of chat model '{model_name}' must be a pytriton.model_config.ModelConfig, got {config!r}")
    if config.response_cache:
        raise PyTritonBadParameterError(
            f"config of chat model '{model_name}': response_cache=True cannot serve a chat model, which streams "
            "(decoupled); leave it off")
    return dataclasses.replace(config, decoupled=True)


def embeddings_config(model_name: str, config: Optional[ModelConfig]) -> ModelConfig:
    """The config of an embeddings model: the user's, or batches of up to 64 texts from the dynamic batcher."""
    if config is None:
        return ModelConfig(max_batch_size=DEFAULT_EMBEDDINGS_BATCH, batcher=DynamicBatcher())
    if not isinstance(config, ModelConfig):
        raise PyTritonBadParameterError(
            f"config of embeddings model '{model_name}' must be a pytriton.model_config.ModelConfig, got {config!r}")
    if not config.batching or config.decoupled:
        raise PyTritonBadParameterError(
            f"config of embeddings model '{model_name}': batching={config.batching}, decoupled={config.decoupled}; "
            "expected batching=True and decoupled=False (the texts of a request and of concurrent requests "
            "reach the callable as one batch)")
    return config


def _texts(model_name: str, request: Any) -> List[str]:
    values = np.asarray(request[EMBED_INPUT]).reshape(-1)
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in values]


def _dimensions(request: Any, count: int) -> List[Optional[int]]:
    if EMBED_DIMENSIONS not in request:
        return [None] * count
    return [int(v) for v in np.asarray(request[EMBED_DIMENSIONS]).reshape(-1)]


def _split(model_name: str, result: Any, sizes: List[int]) -> List[Dict[str, np.ndarray]]:
    total = sum(sizes)
    if isinstance(result, (list, tuple)) and len(result) == total and all(isinstance(r, np.ndarray) for r in result):
        rows: Any = result
    else:
        array = np.asarray(result)
        if array.ndim != 2 or array.shape[0] != total or array.dtype.kind not in "fiu":
            raise ValueError(f"model '{model_name}': the embeddings callable returned {type(result).__name__} of "
                             f"shape {getattr(array, 'shape', '?')}; expected a numeric array of shape ({total}, dim), "
                             "one row per text")
        rows = array.astype(np.float32, copy=False)
    answers, start = [], 0
    for size in sizes:
        part = rows[start:start + size]
        answers.append({EMBED_OUTPUT: np.stack([np.asarray(r, dtype=np.float32) for r in part])})
        start += size
    return answers


def embeddings_callable(model_name: str, infer_func: EmbedFunc, dimensions: bool) -> Callable[..., Any]:
    """The pytriton callable of `bind_embeddings`: every text of the batch in one call of `infer_func`."""

    def gather(requests: List[Any]) -> Tuple[List[str], Dict[str, Any], List[int]]:
        texts = [_texts(model_name, r) for r in requests]
        flat = [text for group in texts for text in group]
        kwargs = {}
        if dimensions:
            kwargs["dimensions"] = [d for r, group in zip(requests, texts) for d in _dimensions(r, len(group))]
        return flat, kwargs, [len(group) for group in texts]

    if inspect.iscoroutinefunction(infer_func) or inspect.iscoroutinefunction(getattr(infer_func, "__call__", None)):  # noqa: B004

        async def serve_async(requests: List[Any]) -> List[Dict[str, np.ndarray]]:
            flat, kwargs, sizes = gather(requests)
            return _split(model_name, await infer_func(flat, **kwargs), sizes)

        return serve_async

    def serve(requests: List[Any]) -> List[Dict[str, np.ndarray]]:
        flat, kwargs, sizes = gather(requests)
        return _split(model_name, infer_func(flat, **kwargs), sizes)

    return serve


class OpenAIBindings:
    """`bind_chat` and `bind_embeddings`, for a facade with pytriton's `bind`: the base of `TritonBase`
    (``pytriton.facade.base``), so `Triton` and `RemoteTriton` have them."""

    bind: Callable[..., None]

    def bind_chat(
        self,
        model_name: str,
        infer_func: ChatFunc,
        model_version: int = 1,
        config: Optional[ModelConfig] = None,
        strict: bool = False,
        trace_config: Optional[List[str]] = None,
    ) -> None:
        """Serve `infer_func` as a chat model: ``/v1/chat/completions`` and ``/v1/completions`` of the front.

        Args:
            model_name: the name clients give as ``model``.
            infer_func: ``chat(messages, params)``: `messages` is the list of message dicts as sent
                (a completion's prompt arrives as one user message), `params` the request's other
                fields. A generator or async generator of pieces: str (text of the answer), or
                dicts with ``content``, ``tool_calls``, ``finish_reason`` or ``usage``. Decorated
                with ``@batch``: ``chat(conversations, params)`` with one entry per conversation
                of Triton's batch, yielding at each step a list of pieces (None for nothing).
                A ``@continuous`` step function (continuous batching, see docs/streaming.md):
                called once per step with the conversations active now (`Stream` objects whose
                ``inputs`` are ``{"messages": [...], "params": {...}}``), returning a piece (or
                None) per conversation; `Stream.finish` ends that answer.
            model_version: the version served.
            config: instances, batching (the ``@batch`` form needs ``max_batch_size`` and a
                batcher delay to gather conversations) and the rest of `ModelConfig`; the model
                is always decoupled. None: one conversation per call, many calls at once (for a
                ``@continuous`` step function: up to 32 conversations per step).
            strict, trace_config: as for `bind`.
        """
        if not callable(infer_func):
            raise PyTritonBadParameterError(
                f"infer_func of chat model '{model_name}' must be a callable, got {infer_func!r}")
        served: Callable[..., Any]
        if isinstance(infer_func, ContinuousStep):  # conversations join and leave a running step
            model_config = chat_config(model_name, config if config is not None else ModelConfig(
                batching=False, max_batch_size=DEFAULT_CONTINUOUS_STREAMS))
            served = ContinuousStep(ChatSteps(model_name, infer_func, model_config.batching), infer_func.max_steps)
        else:
            model_config = chat_config(model_name, config)
            multiplexed = multiplexed_directly(infer_func)  # a chat function per variant: the runner goes under it
            chat = multiplexed[1] if multiplexed is not None else infer_func
            under_batch = batched_function(chat)
            if under_batch is not None and not model_config.batching:
                raise PyTritonBadParameterError(
                    f"chat model '{model_name}': infer_func is @batch-decorated but config has batching=False; give "
                    "config=ModelConfig(max_batch_size=N, batcher=DynamicBatcher(max_queue_delay_microseconds=...))")
            served = ChatRunner(model_name, chat, under_batch, model_config.batching)
            if multiplexed is not None:
                served = multiplexed[0].wrap(served.__call__)  # the bound method: seen as an async generator
        self.bind(model_name=model_name, infer_func=served, inputs=list(CHAT_INPUTS), outputs=list(CHAT_OUTPUTS),
                  model_version=model_version, config=model_config, strict=strict, trace_config=trace_config)

    def bind_embeddings(
        self,
        model_name: str,
        infer_func: EmbedFunc,
        model_version: int = 1,
        config: Optional[ModelConfig] = None,
        strict: bool = False,
        trace_config: Optional[List[str]] = None,
        dimensions: bool = False,
    ) -> None:
        """Serve `infer_func` as an embeddings model: ``/v1/embeddings`` of the front.

        Args:
            model_name: the name clients give as ``model``.
            infer_func: ``embed(texts)``: a list of str, every text of one Triton batch (several
                requests' texts when the dynamic batcher gathered them), returning an array of
                shape ``(len(texts), dim)``. May be a coroutine function.
            model_version: the version served.
            config: batching options; None: ``max_batch_size=64`` with the dynamic batcher. A
                request with more texts than ``max_batch_size`` is split by the front.
            strict, trace_config: as for `bind`.
            dimensions: True: the model honours the request's ``dimensions`` field, and
                `infer_func` is called ``embed(texts, dimensions=[...])`` with each text's wanted
                length (None where not asked); False: requests naming it are refused.
        """
        if not callable(infer_func):
            raise PyTritonBadParameterError(
                f"infer_func of embeddings model '{model_name}' must be a callable, got {infer_func!r}")
        inputs = [Tensor(name=EMBED_INPUT, dtype=bytes, shape=(1,))]
        if dimensions:
            inputs.append(Tensor(name=EMBED_DIMENSIONS, dtype=np.int32, shape=(1,), optional=True))
        self.bind(model_name=model_name, infer_func=embeddings_callable(model_name, infer_func, dimensions),
                  inputs=inputs, outputs=[Tensor(name=EMBED_OUTPUT, dtype=np.float32, shape=(-1,))],
                  model_version=model_version, config=embeddings_config(model_name, config), strict=strict,
                  trace_config=trace_config)
