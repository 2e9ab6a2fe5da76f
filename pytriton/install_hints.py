"""The pip lines that pytriton's messages give (pure): each one works from where pytriton came from.

pytriton and pytriton-client are on no package index yet: a line such as
``pip install 'pytriton[openai]'`` or ``pip install pytriton==0.1.0`` fails in a fresh
environment. A message that needs something installed therefore names what works wherever
pytriton came from: the packages of an extra (they are on PyPI), or the full package from the
checkout or git URL that pip recorded for pytriton-client (``direct_url.json``, PEP 610).
``tests/docs/test_install_lines.py`` holds every page and message to that.
"""

from __future__ import annotations

import json
import os
import shlex
from typing import Callable, Optional
from urllib.parse import unquote, urlparse

OPENAI_EXTRA = (
    "pip install 'aiohttp>=3.9' (the openai extra's one package; or install pytriton with the extra: "
    "pip install '/path/to/pytriton[openai]' from a checkout)"
)
"""What the OpenAI-compatible API needs installed (pyproject's ``openai`` extra)."""

TELEMETRY_EXTRA = (
    "pip install opentelemetry-api opentelemetry-sdk opentelemetry-exporter-otlp-proto-http (the telemetry extra's "
    "packages; or install pytriton with the extra: pip install '/path/to/pytriton[telemetry]' from a checkout)"
)
"""What pytriton's own spans need installed (pyproject's ``telemetry`` extra)."""

GENERIC_FULL_PACKAGE = (
    "install it from a checkout of pytriton's repository (pip install /path/to/pytriton) or from its git URL "
    "(pip install \"pytriton @ git+<the repository's URL>\"); either brings these clients too"
)


def full_package_hint(direct_url: Optional[str], isfile: Callable[[str], bool] = os.path.isfile) -> str:
    """How to install the full package where pytriton-client is installed alone.

    Args:
        direct_url: the text of pytriton-client's ``direct_url.json`` (None when pip recorded none).
        isfile: checks that a checkout still holds ``pyproject.toml``.

    Returns:
        The pip line for the same git URL at the same commit, or for the checkout whose
        ``pytriton-client/`` folder it was built from; else both forms, with placeholders.
    """
    try:
        origin = json.loads(direct_url) if direct_url else None
    except ValueError:
        origin = None
    if not isinstance(origin, dict) or not isinstance(origin.get("url"), str):
        return GENERIC_FULL_PACKAGE
    url: str = origin["url"]
    vcs = origin.get("vcs_info")
    if isinstance(vcs, dict) and vcs.get("vcs") == "git" and origin.get("subdirectory") == "pytriton-client":
        commit = vcs.get("commit_id")
        pinned = f"{url}@{commit}" if commit else url
        return f'install it from the same git URL: pip install "pytriton @ git+{pinned}"'
    if "dir_info" in origin and url.startswith("file://"):
        folder = os.path.dirname(unquote(urlparse(url).path).rstrip("/"))
        if isfile(os.path.join(folder, "pyproject.toml")):
            return f"install it from the checkout this one came from: pip install {shlex.quote(folder)}"
    return GENERIC_FULL_PACKAGE
