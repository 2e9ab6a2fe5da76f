# syntax=docker/dockerfile:1
#
# An image that serves Python callables through Triton with pytriton. As built here it serves
# the two models of examples/serve.py (Linear, Upper) with `Triton.serve()`:
#
#   docker build -t pytriton-serve .
#   docker run --rm --shm-size=1g --stop-timeout 60 -p 8000:8000 -p 8001:8001 -p 8002:8002 pytriton-serve
#
# --stop-timeout: `docker stop` waits 10 s by default before SIGKILL, and the drain may take
# TritonConfig.exit_timeout_secs (30 s) + 15 s; an image cannot change Docker's wait (compose:
# stop_grace_period). docs/deploying.md, "Docker", has the arithmetic.
#
# Your own serving script, either way (docs/deploying.md, "Docker"):
#   - a build argument naming a script in the build context:
#       docker build --build-arg SERVE_SCRIPT=my_server.py -t my-models .
#   - FROM this image and copy, when the script needs more packages:
#       FROM pytriton-serve
#       USER root
#       RUN python -m pip install --no-cache-dir torch==2.5.1
#       USER 10001:10001
#       COPY my_server.py /app/serve.py
#
# Needs BuildKit (Docker's default builder since 23.0) for the RUN --mount options.

# Debian 12 (glibc 2.36; the bundled tritonserver needs >= 2.35) with CPython 3.11 built with a
# shared libpython, which Triton's Python-backend stub embeds. Both stages use the same image,
# so the wheel's stub NumPy is built for the Python that runs it.
# Pinned by digest as well as tag: the tag is rebuilt with Debian's updates, the digest names one
# build, so two builds of one commit start from the same files. The digest is the tag's
# multi-platform index (Docker picks the linux/amd64 image from it). To move to a newer build or
# another tag, take the "Digest:" line of
#   docker buildx imagetools inspect python:3.11.13-slim-bookworm
# and replace both parts below (tests/functional/deploy/test_dockerfile.py checks the form).
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm@sha256:86adf8dbadc3d6e82ee5dd2c74bec2e1c2467cdad47886280501df722372d2e1

# ---- stage 1: the wheel ---------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
# Build isolation is off, so the lock's setuptools (constraints.txt) is the one that builds the wheel.
COPY constraints.txt ./
RUN python -m pip install --no-cache-dir --root-user-action=ignore --constraint constraints.txt setuptools
COPY pyproject.toml LICENSE NOTICE ./
COPY build_backend/ build_backend/
COPY pytriton/ pytriton/
COPY pytriton-client/ pytriton-client/
# Two wheels: pytriton-client (the clients, pure Python) and pytriton, which requires it
# (docs/installation.md). The build backend fetches the server tree from the pinned
# nvidia-pytriton==0.7.0 wheel and a NumPy 1.x for the stub, both checked against their sha256 (as
# `make install` does); the cache mount keeps those wheels across builds. .dockerignore keeps a
# local pytriton/tritonserver out.
RUN --mount=type=cache,target=/root/.cache/pytriton \
    python -m pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /wheels . ./pytriton-client

# ---- stage 2: the server image: the wheel, its locked dependencies, tini; no build tools ----
FROM ${PYTHON_IMAGE}
ARG SERVE_SCRIPT=examples/serve.py
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# tini is PID 1 and runs python as an ordinary process. The library does handle being PID 1
# itself: serve() installs SIGTERM/SIGINT handlers and reaps the zombies it adopts
# (pytriton.server.supervisor.reap_adopted). But a PID 1 ignores every signal it has no handler
# for, and there are moments with none: a SIGTERM while serve() is still starting tritonserver
# and loading the models (harness/faults_repro.py sigterm-at-load), or a script of your own that
# calls run() and waits in a loop of its own. As PID 1 that script would ignore `docker stop`
# until it is SIGKILLed after the stop timeout; under tini the signal ends it at once.
# Orphans (stubs of a killed tritonserver) are reaped by tini. So `docker run --init` is not needed.
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini=0.19.0-1+b3 \
 && rm -rf /var/lib/apt/lists/*

# Only the wheels come from the first stage, through a bind mount so that they stay in no layer;
# pytriton-client's is named beside pytriton's, which requires it (it is not on the index).
# With its `telemetry` extra (pyproject.toml: the OpenTelemetry SDK and OTLP/HTTP exporter):
# without it a server that traces exports Triton's spans only, never pytriton's own nor those
# of the callables (docs/observability.md). And its `openai` extra, for the OpenAI-compatible
# API (docs/openai.md), which OPENAI_PORT below turns on. `set --` expands the wheel's file name, so that the
# extra can follow it ("<file>.whl[telemetry]"; a glob would take the brackets as a pattern).
RUN --mount=type=bind,from=wheel,source=/wheels,target=/wheels \
    --mount=type=bind,source=constraints.txt,target=/tmp/constraints.txt \
    set -- /wheels/pytriton-*.whl \
 && python -m pip install --no-cache-dir --root-user-action=ignore \
        --constraint /tmp/constraints.txt /wheels/pytriton_client-*.whl "${1}[telemetry,openai]"

# A user of its own, by number so that Kubernetes' runAsNonRoot can verify it.
RUN useradd --create-home --no-log-init --uid 10001 --user-group pytriton
WORKDIR /app
COPY ${SERVE_SCRIPT} /app/serve.py
USER 10001:10001

# A broken image fails its build here: glibc, libpython, the server tree and its stub's libraries
# and NumPy, a throwaway tritonserver start, the workspace folder, checked as the user that will
# serve. --build leaves out the ports and /dev/shm: the build container's say nothing about
# those of the container that will run (`docker run ... pytriton check` looks at those).
RUN pytriton check --build

# Triton's HTTP, gRPC and metrics ports (TritonConfig's defaults), and the OpenAI-compatible API's
# when built with --build-arg OPENAI_PORT=9000 (TritonConfig.openai_port; empty, the default:
# off, since an empty PYTRITON_TRITON_CONFIG_* variable counts as unset).
ARG OPENAI_PORT=
ENV PYTRITON_TRITON_CONFIG_OPENAI_PORT=${OPENAI_PORT}
EXPOSE 8000 8001 8002 ${OPENAI_PORT}

# Ready means the server and every model answer (/v2/health/ready); the standard library only,
# so the image needs no curl. The port follows PYTRITON_TRITON_CONFIG_HTTP_PORT when it is set.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; port = os.environ.get('PYTRITON_TRITON_CONFIG_HTTP_PORT') or '8000'; urllib.request.urlopen(f'http://127.0.0.1:{port}/v2/health/ready', timeout=4)"]

ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["python", "/app/serve.py"]
