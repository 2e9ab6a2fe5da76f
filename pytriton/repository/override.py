"""A written model folder -> the body of Triton's load-with-override call.

A process that shares no folder with the server (`RemoteTriton` without a workspace) sends its
model instead of writing it where the server reads: the configuration as JSON, every other file
of the folder by its path relative to the folder. Triton rebuilds the folder on its side. The
folder is still written locally first, by the same code as for a local server, so both paths
serve the same files.
"""

from __future__ import annotations

import pathlib
from typing import Dict, Tuple

from google.protobuf import json_format

from pytriton.repository.pbtxt import parse_pbtxt

CONFIG_FILE = "config.pbtxt"


def load_override(folder: pathlib.Path) -> Tuple[str, Dict[str, bytes]]:
    """``(config JSON, {relative path: content})`` of the model folder written at `folder`."""
    config = parse_pbtxt((folder / CONFIG_FILE).read_text())
    config_json = json_format.MessageToJson(config, preserving_proto_field_name=True)
    files = {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != CONFIG_FILE and "__pycache__" not in path.parts
    }
    return config_json, files
