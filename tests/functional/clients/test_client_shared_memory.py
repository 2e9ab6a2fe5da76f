"""Tensors through Triton's system shared memory (``shared_memory=``), for every one-response client.

One server (pytriton's default security: the shared-memory API needs its access token) serves a
model whose output size its configuration fixes (``Static``: inputs and outputs go through the
region) and one whose output varies (``Dynamic``: the input goes through the region, the output
through the socket). What the server has registered is read from its shared-memory API, and what
the region holds from /dev/shm, so the tests see where the tensors went.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pathlib
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
import tritonclient.http
from support import grpc_url, http_url, server_config, shm_entries, wait_until

from pytriton.client import (
    AsyncioModelClient,
    DecoupledModelClient,
    FuturesModelClient,
    ModelClient,
    PyTritonClientInferenceServerError,
    PyTritonClientValueError,
)
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton

pytestmark = pytest.mark.functional

WIDTH = 65536  # 256 KiB of float32 per sample: above the "auto" threshold
SCRIPT = pathlib.Path(__file__).parent / "shm_client_script.py"
MINE = f"pytriton-{os.getpid()}-"


@pytest.fixture(scope="module")
def server():
    config = server_config()
    triton = Triton(config=config)
    triton.bind("Static", batch(lambda x: {"y": x * 2}), inputs=[Tensor(name="x", dtype=np.float32, shape=(WIDTH,))],
                outputs=[Tensor(name="y", dtype=np.float32, shape=(WIDTH,))], config=ModelConfig(max_batch_size=8))
    triton.bind("Dynamic", batch(lambda x: {"y": x * 2}), inputs=[Tensor(name="x", dtype=np.float32, shape=(-1,))],
                outputs=[Tensor(name="y", dtype=np.float32, shape=(-1,))], config=ModelConfig(max_batch_size=8))
    triton.run()
    try:
        yield config, triton.get_access_token()
    finally:
        triton.stop()


@pytest.fixture(params=["http", "grpc"])
def url(request, server):
    return http_url(server[0]) if request.param == "http" else grpc_url(server[0])


def registered(server) -> dict:
    """The server's registered regions: name -> key (asked over HTTP with the token)."""
    config, token = server
    client = tritonclient.http.InferenceServerClient(f"127.0.0.1:{config.http_port}")
    try:
        status = client.get_system_shared_memory_status(headers={"triton-access-token": token})
    finally:
        client.close()
    return {region["name"]: region["key"] for region in status}


def client_regions(server) -> set:
    """The regions of this test process's clients that the server has registered."""
    return {name for name in registered(server) if name.startswith(MINE)}


def client_entries() -> list:
    """This process's /dev/shm entries that clients make: regions and leases (the server's lease is
    among the leases, but stays the same; its own arenas come and go, and are left out)."""
    return [name for name in shm_entries(MINE) if "-client-" in name or name.endswith("-lock")]


def region_holds(name: str, array: np.ndarray) -> bool:
    with open(f"/dev/shm/{name}", "rb") as segment:
        return array.tobytes() in segment.read()


# Each runs three rounds of requests through one client and notes the registered regions after each.
def sync_rounds(url, token, model, data, regions_now):
    seen = []
    with ModelClient(url, model, access_token=token, shared_memory=True, init_timeout_s=30) as client:
        for _ in range(3):
            np.testing.assert_array_equal(client.infer_batch(data)["y"], data * 2)
            seen.append(regions_now())
    return seen


def futures_rounds(url, token, model, data, regions_now):
    seen = []
    with FuturesModelClient(url, model, access_token=token, shared_memory=True, max_workers=2) as client:
        for _ in range(3):
            futures = [client.infer_batch(data) for _ in range(4)]
            for future in futures:
                np.testing.assert_array_equal(future.result(timeout=60)["y"], data * 2)
            seen.append(regions_now())
    return seen


def asyncio_rounds(url, token, model, data, regions_now):
    async def run():
        seen = []
        async with AsyncioModelClient(url, model, access_token=token, shared_memory=True) as client:
            for _ in range(3):
                answers = await asyncio.gather(*(client.infer_batch(data) for _ in range(3)))
                for answer in answers:
                    np.testing.assert_array_equal(answer["y"], data * 2)
                seen.append(regions_now())
        return seen

    return asyncio.run(run())


CLIENTS = {"sync": (sync_rounds, 1), "futures": (futures_rounds, 2), "asyncio": (asyncio_rounds, 3)}
"""Each flavour and the most regions it needs: one per request in flight."""


@pytest.mark.parametrize("flavour", sorted(CLIENTS))
@pytest.mark.parametrize("model", ["Static", "Dynamic"])
def test_answers_come_through_regions_registered_once_and_cleared_on_close(server, url, flavour, model):
    run, most = CLIENTS[flavour]
    before = client_entries()
    data = np.random.default_rng(0).random((2, WIDTH), dtype=np.float32)
    seen = run(url, server[1], model, data, lambda: client_regions(server))
    assert 1 <= len(seen[0]) <= most
    assert all(names == seen[0] for names in seen), "regions were registered again instead of reused"
    assert client_regions(server) == set(), "the client left regions registered"
    assert client_entries() == before, "the client left /dev/shm entries"


def test_the_region_holds_the_inputs_and_only_fixed_size_outputs(server, url):
    data = np.random.default_rng(1).random((2, WIDTH), dtype=np.float32)
    for model, output_in_region in (("Static", True), ("Dynamic", False)):
        with ModelClient(url, model, access_token=server[1], shared_memory=True) as client:
            client.infer_batch(data)
            (name,) = client_regions(server)
            assert region_holds(name, data)
            assert region_holds(name, data * 2) is output_in_region


def test_a_region_grows_when_a_batch_does_not_fit(server, url):
    with ModelClient(url, "Static", access_token=server[1], shared_memory=True) as client:
        small = np.ones((1, WIDTH), dtype=np.float32)
        client.infer_batch(small)
        first = client_regions(server)
        large = np.ones((8, WIDTH), dtype=np.float32)  # 2 MiB in, 2 MiB out: more than the first region
        np.testing.assert_array_equal(client.infer_batch(large)["y"], large * 2)
        second = client_regions(server)
        assert len(second) == 1 and second != first, "the small region was not replaced"
        np.testing.assert_array_equal(client.infer_batch(small)["y"], small * 2)
        assert client_regions(server) == second, "a smaller batch did not reuse the grown region"


def test_auto_without_the_token_falls_back_to_the_socket_with_one_log_line(server, url, caplog):
    data = np.ones((2, WIDTH), dtype=np.float32)
    before = client_entries()
    with caplog.at_level(logging.WARNING, logger="pytriton.client"):
        with FuturesModelClient(url, "Static", shared_memory="auto", max_workers=2) as client:
            for future in [client.infer_batch(data) for _ in range(6)]:
                np.testing.assert_array_equal(future.result(timeout=60)["y"], data * 2)
    lines = [record.getMessage() for record in caplog.records if "shared memory is not available" in record.message]
    assert len(lines) == 1, lines
    assert "access token" in lines[0]
    assert client_regions(server) == set() and client_entries() == before


def test_auto_leaves_small_tensors_on_the_socket(server, url):
    with ModelClient(url, "Dynamic", access_token=server[1], shared_memory="auto") as client:
        small = np.ones((2, 16), dtype=np.float32)
        np.testing.assert_array_equal(client.infer_batch(small)["y"], small * 2)
        assert client_regions(server) == set()


def test_true_without_the_token_raises_saying_what_is_needed(server, url):
    with ModelClient(url, "Static", shared_memory=True) as client:
        with pytest.raises(PyTritonClientInferenceServerError, match="access_token"):
            client.infer_batch(np.ones((1, WIDTH), dtype=np.float32))


def test_wrong_values_are_refused(url):
    with pytest.raises(PyTritonClientValueError, match="shared_memory must be 'auto', True or False, got 'yes'"):
        ModelClient(url, "Static", shared_memory="yes")
    with pytest.raises(PyTritonClientValueError, match="one-response clients"):
        DecoupledModelClient(url, "Static", shared_memory=True)


def _client_process(url, token, mode, wrapper=()):
    process = subprocess.Popen([*wrapper, sys.executable, str(SCRIPT), url, "Static", token, mode],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    if not line:
        process.wait(timeout=30)
        raise AssertionError(f"the client script failed: {process.stderr.read()[-3000:]}")
    return process, json.loads(line)


def test_the_supervisor_clears_a_killed_clients_regions(server, url):
    process, report = _client_process(url, server[1], "true")
    try:
        assert report["right"]
        names = report["names"]
        assert any("-client-" in name for name in names) and any(name.endswith("-lock") for name in names)
        owner = "-".join(names[0].split("-")[:3])
        assert any(name.startswith(owner) for name in registered(server))
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        process.stdout.close()
        process.stdin.close()
        process.stderr.close()
    cleared = wait_until(lambda: not any(key.lstrip("/").startswith(owner) for key in registered(server).values())
                         and not shm_entries(owner), timeout_s=20, interval_s=0.5)
    assert cleared, f"still registered: {registered(server)}; in /dev/shm: {shm_entries(owner)}"


def test_auto_falls_back_when_the_server_cannot_open_the_segment(server, url):
    """The client in a private /dev/shm (a container's): the server cannot open its segment."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to give the client a private /dev/shm")
    wrapper = ("unshare", "-m", "sh", "-c", 'mount -t tmpfs tmpfs /dev/shm && exec "$@"', "sh")
    process, report = _client_process(url, server[1], "auto", wrapper)
    try:
        process.stdin.write("\n")
        process.stdin.close()
        process.wait(timeout=30)
        errors = process.stderr.read()
    finally:
        process.kill()
        process.stdout.close()
        process.stderr.close()
    assert report["right"]
    lines = [line for line in errors.splitlines() if "shared memory is not available" in line]
    assert len(lines) == 1 and "Unable to open shared memory region" in lines[0], errors[-3000:]
    assert not [name for name in report["names"] if "-client-" in name], "the refused region was not removed"


def test_a_twin_from_an_existing_client_shares_memory_too_and_a_streaming_one_does_not(server, url):
    data = np.ones((1, WIDTH), dtype=np.float32)
    with ModelClient(url, "Static", access_token=server[1], shared_memory=True) as client:
        client.infer_batch(data)
        with ModelClient.from_existing_client(client) as twin:
            np.testing.assert_array_equal(twin.infer_batch(data)["y"], data * 2)
            assert len(client_regions(server)) == 2  # one region each
        DecoupledModelClient.from_existing_client(client).close()
