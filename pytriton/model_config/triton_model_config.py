"""``TritonModelConfig``: the published PyTriton's name for a deployed model's Triton configuration.

This module exists so that code written for the published PyTriton, which imports
``TritonModelConfig`` (and ``TensorSpec``, ``ResponseCache``) from here, runs unchanged. In this
library the object that describes a deployed model is the one clients return as
``client.model_config``, `pytriton.client.model_config.ClientModelConfig`; the names below are
that class and its parts under their published names, not a second, parallel description. So
``isinstance(client.model_config, TritonModelConfig)`` holds, and
`pytriton.model_config.parser.ModelConfigParser` returns the same class.

What differs from the published dataclass:

- there is no ``model_version``: a model's configuration names no version, so there is no
  truthful value to report (the published class always says 1);
- there is no ``model_warmup``: warm-up samples are the server's business and are not read back;
- ``batching`` is a property (``max_batch_size > 0``), not a separate field;
- ``inputs`` and ``outputs`` are tuples, empty when the model declares none; a BYTES tensor has
  dtype ``object``;
- the class is frozen: use ``dataclasses.replace`` to derive a changed copy.

The classes live in ``pytriton.client.model_config`` (the clients build them from the server's
JSON), so importing this module imports the client package; nothing of
``pytriton.model_config``'s own package imports this module, so there is no import cycle.
"""

from pytriton.client.model_config import ClientModelConfig, ResponseCache, TensorSpec

#: The published name of `pytriton.client.model_config.ClientModelConfig` (the same class).
TritonModelConfig = ClientModelConfig

__all__ = ["ResponseCache", "TensorSpec", "TritonModelConfig"]
