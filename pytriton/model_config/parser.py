"""``ModelConfigParser``: the published PyTriton's reader of Triton model configurations.

This module exists so that code written for the published PyTriton, which builds a
`pytriton.model_config.triton_model_config.TritonModelConfig` with
``ModelConfigParser.from_dict`` (the JSON a server returns for ``GET v2/models/<name>/config``)
or ``ModelConfigParser.from_file`` (a ``config.pbtxt``), runs unchanged. Both go through the
clients' reader of the server's JSON
(`pytriton.model_config.triton_model_config.parse_model_config`), so a configuration read from
a file is described exactly as one fetched from a server. ``from_file`` is the one piece of I/O
in ``pytriton.model_config``: it reads the single file it is given.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any, Mapping, Union

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as pb

from pytriton.exceptions import PyTritonModelConfigError
from pytriton.model_config.triton_model_config import TritonModelConfig, parse_model_config

__all__ = ["ModelConfigParser"]


class ModelConfigParser:
    """Builds a `TritonModelConfig` from a Triton model configuration, as JSON or as ``config.pbtxt``."""

    @classmethod
    def from_dict(cls, model_config_dict: Mapping[str, Any]) -> TritonModelConfig:
        """Describe a model from its configuration in Triton's JSON form.

        Args:
            model_config_dict: the configuration as a mapping, as HTTP returns it or as gRPC's
                ``ModelConfigResponse`` renders to JSON (the ``{"config": {...}}`` wrapper is
                accepted; fields at their default value may be missing).

        Returns:
            The model's configuration.

        Raises:
            PyTritonModelConfigError: the configuration has no name, a tensor without a name,
                or a data type without a numpy equivalent.
        """
        try:
            return parse_model_config(model_config_dict)
        except PyTritonModelConfigError as exc:
            raise PyTritonModelConfigError(f"The model configuration cannot be described: {exc}") from exc
        except (KeyError, TypeError, ValueError) as exc:
            reason = f"missing field {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
            raise PyTritonModelConfigError(f"The model configuration cannot be described: {reason}") from exc

    @classmethod
    def from_file(cls, config_path: Union[str, os.PathLike[str]]) -> TritonModelConfig:
        """Describe a model from its ``config.pbtxt`` (Triton's text protobuf format).

        A configuration without a ``name`` gets the name of the folder that holds the file, as
        Triton names a model in its repository.

        Args:
            config_path: the ``config.pbtxt`` file to read.

        Returns:
            The model's configuration.

        Raises:
            PyTritonModelConfigError: the file cannot be read, is not a valid Triton model
                configuration, or describes a model this library cannot; the message names the
                path and the reason.
        """
        path = pathlib.Path(config_path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PyTritonModelConfigError(f"Cannot read the model configuration {str(path)!r}: {exc}") from exc
        try:
            message = text_format.Parse(text, pb.ModelConfig())
        except text_format.ParseError as exc:
            raise PyTritonModelConfigError(
                f"{str(path)!r} is not a valid Triton model configuration: {exc}"
            ) from exc
        raw = json_format.MessageToDict(message, preserving_proto_field_name=True)
        folder = path.absolute().parent.name
        if not raw.get("name") and folder:
            raw["name"] = folder
        try:
            return cls.from_dict(raw)
        except PyTritonModelConfigError as exc:
            raise PyTritonModelConfigError(f"{str(path)!r}: {exc}") from exc
