"""pytriton's environment variables: one registry of their names, meanings and defaults.

Every variable pytriton reads is named here once; the code reads it through the constant below,
and docs/environment.md has the table (`tests/docs/test_environment_table.py` holds it to
`VARIABLES`). The build variables are read by ``build_backend/``, which runs before the package
is importable and so spells them itself; a test holds those spellings to this registry too.

Variables of other programs that pytriton reads as they do (Vertex AI's ``AIP_*``,
``XDG_CACHE_HOME``, ``CC``) are theirs, and documented where they act. A value that is empty
counts as unset everywhere.
"""

from __future__ import annotations

import dataclasses
from typing import Tuple

TRITON_CONFIG_PREFIX = "PYTRITON_TRITON_CONFIG_"
ACCESS_TOKEN = "PYTRITON_ACCESS_TOKEN"
OPENAI_API_KEY = "PYTRITON_OPENAI_API_KEY"
TRITON_SERVER_DIR = "PYTRITON_TRITON_SERVER_DIR"
BACKEND_LIBRARY = "PYTRITON_BACKEND_LIBRARY"
SERVER_LD_PRELOAD = "PYTRITON_SERVER_LD_PRELOAD"
METRICS_PERIOD_S = "PYTRITON_METRICS_PERIOD_S"
PROXY_SPIN_US = "PYTRITON_PROXY_SPIN_US"
BATCH_HOLD_US = "PYTRITON_BATCH_HOLD_US"
HOP_STAMPS = "PYTRITON_HOP_STAMPS"
HOME = "PYTRITON_HOME"
CACHE_DIR = "PYTRITON_CACHE_DIR"
SKIP_SERVER_FETCH = "PYTRITON_SKIP_SERVER_FETCH"
BACKEND_CFLAGS = "PYTRITON_BACKEND_CFLAGS"
NATIVE_WERROR = "PYTRITON_NATIVE_WERROR"


@dataclasses.dataclass(frozen=True)
class Variable:
    """One environment variable of pytriton's.

    Attributes:
        name: the variable; for `TRITON_CONFIG_PREFIX`, the prefix of one variable per field.
        meaning: what it sets.
        default: what holds while it is unset.
        read_by: ``"serving"`` (the process that runs `Triton` or `RemoteTriton`), ``"import"``
            (any process that imports pytriton) or ``"build"`` (``pip install`` and ``make``).
        see: the docs page (relative to ``docs/``, with its section) that says more, or "".
    """

    name: str
    meaning: str
    default: str
    read_by: str
    see: str = ""


VARIABLES: Tuple[Variable, ...] = (
    Variable(
        TRITON_CONFIG_PREFIX + "<FIELD>",
        "any `TritonConfig` field, by its name in upper case (e.g. `PYTRITON_TRITON_CONFIG_HTTP_PORT`); "
        "a field set in code wins",
        "the field's default",
        "serving",
        see="deploying.md#configuration",
    ),
    Variable(
        ACCESS_TOKEN,
        "the access token of the restricted Triton endpoints when `TritonSecurityConfig.access_token` "
        "is not given; read when the config is built",
        "a new random token per server",
        "serving",
        see="security.md#choosing-the-token-and-the-restricted-groups",
    ),
    Variable(
        OPENAI_API_KEY,
        "the key of the OpenAI-compatible API when `TritonSecurityConfig.openai_api_key` is not given",
        "no key is checked",
        "serving",
        see="openai.md#starting-it-the-api-key-stopping",
    ),
    Variable(
        TRITON_SERVER_DIR,
        "the root of a Triton installation to run instead of the bundled server",
        "the server bundled in the package",
        "serving",
        see="installation.md#bringing-your-own-triton",
    ),
    Variable(
        METRICS_PERIOD_S,
        "how often, in seconds, each model brings its worker's metrics to Triton's `/metrics` port",
        "1",
        "serving",
        see="observability.md#metrics",
    ),
    Variable(
        PROXY_SPIN_US,
        "how long, in microseconds, pytriton's backend (or the proxy) polls for a one-request batch's "
        "answer before it sleeps; 0 never polls",
        "200",
        "serving",
        see="performance.md#tuning",
    ),
    Variable(
        BATCH_HOLD_US,
        "how long, in microseconds, an instance of pytriton's backend that is busy (its batches come back "
        "to back) waits before it takes the next batch, so that batches grow; only for models with "
        "dynamic batching and no `max_queue_delay_microseconds`; 0 never waits",
        "100",
        "serving",
        see="performance.md#tuning",
    ),
    Variable(
        HOP_STAMPS,
        "a folder where every hop of each request records its timestamps, for the hop benchmark",
        "nothing is recorded",
        "serving",
        see="design/hop.md",
    ),
    Variable(
        BACKEND_LIBRARY,
        "another build of pytriton's backend library to load (`make asan` points it at a sanitized one)",
        "the library built at install",
        "serving",
    ),
    Variable(
        SERVER_LD_PRELOAD,
        "libraries preloaded into tritonserver alone, as its `LD_PRELOAD` (`make asan`: the sanitizer's runtime)",
        "none",
        "serving",
    ),
    Variable(
        HOME,
        "the folder `pytriton.constants.PYTRITON_HOME` names, read once at import; nothing is written "
        "there, it is kept for code that reads it",
        "`$XDG_CACHE_HOME/pytriton`, else `~/.cache/pytriton`",
        "import",
        see="differences.md",
    ),
    Variable(
        CACHE_DIR,
        "the cache root of the build's downloads: the server wheel and NumPy for the stub go to "
        "`$PYTRITON_CACHE_DIR/wheels`",
        "`${XDG_CACHE_HOME:-~/.cache}/pytriton`",
        "build",
        see="installation.md#what-the-build-fetches",
    ),
    Variable(
        SKIP_SERVER_FETCH,
        "`1` (or `true`, `yes`, `on`) builds without fetching the server, for a server of your own "
        "(`PYTRITON_TRITON_SERVER_DIR`)",
        "the server is fetched",
        "build",
        see="installation.md#bringing-your-own-triton",
    ),
    Variable(
        BACKEND_CFLAGS,
        "more compiler flags for pytriton's backend library (`make asan` adds the sanitizer's)",
        "none",
        "build",
        see="installation.md#what-the-build-compiles",
    ),
    Variable(
        NATIVE_WERROR,
        "`1` (or `true`, `yes`, `on`) makes the backend's compiler warnings errors",
        "warnings stay warnings, except under `CI=true`",
        "build",
    ),
)
"""Every variable, in the order of docs/environment.md's table."""
