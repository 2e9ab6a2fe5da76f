"""Decorators that reshape what an inference callable receives and returns.

Place in the request flow: worker -> decorators -> the user's callable. The worker always calls
the outermost callable with ``requests: List[Request]`` (one mapping of input name -> array per
client request) and expects one mapping of output name -> array per request back. These
decorators are pure transforms between that list-of-dicts form and friendlier forms:

* list -> list: `group_by_keys`, `fill_optionals` (they sit above `batch`);
* list -> keyword arrays: `batch` (one gathered batch), `sample` (one call per request);
* keyword arrays -> keyword arrays: `pad_batch` (below `batch`);
* either form: `group_by_values` and `first_value` (above `batch` they work on whole requests,
  below it on the rows of the batch), `triton_context` (directly on the callable, or below
  `batch`/`sample`);
* a step over the streams running now: `continuous` (continuous batching; it marks the function,
  which receives the `Stream` objects active at each step);
* list -> one call per variant: `multiplexed` (the outermost: many variants of one model, each
  request naming its own, loaded on demand; the callable gets the variant's object as a keyword
  argument, which `batch` and `sample` pass on).

Both stacks below serve one value of ``temperature`` per call; the first is the published
PyTriton's order, the second keeps requests whole (and so also works for streaming callables)::

    @fill_optionals(temperature=np.array([1.0], dtype=np.float32))
    @batch
    @group_by_values("temperature")
    @first_value("temperature")
    def infer(prompt, temperature): ...

    @fill_optionals(temperature=np.array([1.0], dtype=np.float32))
    @group_by_values("temperature")
    @batch
    @first_value("temperature")
    def infer(prompt, temperature): ...

All decorators are built on `wrapt`, so they work on functions, on methods (``__call__``
included) and stacked. A decorator placed where it receives the wrong form of data raises a
`PyTritonValidationError` that says where to move it. The helpers
(`get_model_config`, `convert_output`, `get_triton_context`, ...) serve users' own decorators.
"""

from __future__ import annotations

# The API is `__all__`, implemented in the modules of `pytriton.decorating`. The `name as name`
# imports keep the other names this module held before it was split importable from here.
from pytriton.decorating.common import (
    InferenceRequest,
    InferenceRequests,
    InferenceResult,
    InferenceResults,
    InputNames,
)
from pytriton.decorating.common import Outputs as Outputs
from pytriton.decorating.common import PadFn as PadFn
from pytriton.decorating.context import (
    ModelConfigDict,
    ServedModelConfig,
    TritonContext,
    convert_output,
    get_model_config,
    get_triton_context,
    triton_context,
)
from pytriton.decorating.continuous import continuous
from pytriton.decorating.first_value import first_value
from pytriton.decorating.grouping import group_by_keys, group_by_values
from pytriton.decorating.multiplexing import multiplexed
from pytriton.decorating.padding import ConstantPadder, fill_optionals, pad_batch
from pytriton.decorating.results import gather as gather
from pytriton.decorating.results import map_result as map_result
from pytriton.decorating.shaping import batch, get_inference_request_batch_size, sample
from pytriton.exceptions import PyTritonBadParameterError as PyTritonBadParameterError
from pytriton.exceptions import PyTritonInvalidOperationError as PyTritonInvalidOperationError
from pytriton.exceptions import PyTritonValidationError as PyTritonValidationError
from pytriton.worker.context import current_context as current_context
from pytriton.worker.continuous import Stream
from pytriton.worker.request import Request as Request

__all__ = [
    "ConstantPadder",
    "InferenceRequest",
    "InferenceRequests",
    "InferenceResult",
    "InferenceResults",
    "InputNames",
    "ModelConfigDict",
    "ServedModelConfig",
    "Stream",
    "TritonContext",
    "batch",
    "continuous",
    "convert_output",
    "fill_optionals",
    "first_value",
    "get_inference_request_batch_size",
    "get_model_config",
    "get_triton_context",
    "group_by_keys",
    "group_by_values",
    "multiplexed",
    "pad_batch",
    "sample",
    "triton_context",
]
