"""tritonserver dies under a serving script; SIGTERM drains; a second signal stops at once; PID 1.

Each test runs `serving_script.py` (``Triton.serve()``, as users write it) in a process of its own,
so that the exit status, the signals and what is left afterwards are the user's to see.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time

import numpy as np
import psutil
import pytest
from support import PROXY_ENV, ServingScript, http_status, our_leftovers, served_backend, stub_processes, wait_until

from pytriton.client import DecoupledModelClient, ModelClient
from pytriton.client.exceptions import PyTritonClientError

pytestmark = pytest.mark.functional

def _running(processes: list) -> list:
    """The processes still running: a dead stub may stay a zombie until whoever adopted it reaps it."""
    running = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                running.append(process.pid)
        except psutil.NoSuchProcess:
            pass
    return running


def _leftovers_of(pid_prefix: str) -> dict:
    processes = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(process.info.get("cmdline") or [])
        if pid_prefix in cmdline:
            processes.append(cmdline[:120])
    segments = sorted(name for name in os.listdir("/dev/shm") if name.startswith(pid_prefix))
    return {"processes": processes, "segments": segments}


def _loading(script: ServingScript, model: str) -> list:
    """The command line of the script's tritonserver once `model` loads: on the proxy path its stub
    runs; on pytriton's backend the server connected to the worker (its warm-up runs next)."""
    try:
        servers = [p for p in script.root().children(recursive=True) if p.name() == "tritonserver"]
        if not servers:
            return []
        if served_backend() == "python":
            connected = bool(stub_processes(model, script.process.pid))
        else:  # the backend's instance holds a connection to the worker's data socket (SEQPACKET: tritonserver's only)
            connected = any(c.type == socket.SOCK_SEQPACKET for c in servers[0].net_connections(kind="unix"))
    except (AssertionError, psutil.Error):
        return []
    if not connected or http_status(f"{script.base}/v2/models/{model}/ready") == 200:
        return []
    return servers[0].cmdline()


def test_killed_tritonserver_makes_serve_raise_and_leaves_no_stub():
    script = ServingScript(env=dict(os.environ, **PROXY_ENV))  # stubs to watch: the proxy path
    try:
        server = script.server()
        sleep_stubs, token_stubs = stub_processes("Sleep", server.pid), stub_processes("Tokens", server.pid)
        assert sleep_stubs and token_stubs
        stubs = sleep_stubs + token_stubs
        server.kill()
        killed_at = time.monotonic()
        gone = wait_until(lambda: not _running(stubs), timeout_s=2.5)
        assert gone, f"stubs outlived their server by 2.5 s: {_running(stubs)}"
        returncode, err = script.finish(timeout_s=15)
    finally:
        if script.process.poll() is None:
            script.kill()
    assert returncode != 0, "a crashed server must make the script exit non-zero"
    assert "PyTritonServerCrashedError" in err
    assert "killed by signal 9 (SIGKILL)" in err
    assert "Its last output" in err
    assert time.monotonic() - killed_at < 15
    prefix = f"pytriton-{script.info['pid']}-"
    assert _leftovers_of(prefix) == {"processes": [], "segments": []}


def test_run_users_see_is_alive_false_and_a_clear_error_on_the_next_call():
    from support import running_triton

    from pytriton.exceptions import PyTritonServerCrashedError
    from pytriton.model_config import Tensor

    def identity(requests):
        return [{"y": request["x"]} for request in requests]

    tensors = {"inputs": [Tensor(name="x", dtype=np.float32, shape=(1,))],
                   "outputs": [Tensor(name="y", dtype=np.float32, shape=(1,))]}
    with running_triton() as triton:
        triton.bind("Identity", identity, **tensors)
        triton.run()
        server = [p for p in psutil.Process().children() if p.name() == "tritonserver"]
        assert len(server) == 1
        stubs = stub_processes("Identity")
        server[0].send_signal(signal.SIGSEGV)
        assert wait_until(lambda: not triton.is_alive(), timeout_s=2), "is_alive() still true 2 s after the crash"
        assert wait_until(lambda: not _running(stubs), timeout_s=2.5), f"a stub outlived its server: {_running(stubs)}"
        with pytest.raises(PyTritonServerCrashedError, match=r"signal 11 \(SIGSEGV\)") as caught:
            triton.bind("Other", identity, **tensors)
        assert caught.value.returncode == -signal.SIGSEGV
        assert caught.value.log_tail
        # Triton's own handler names the signal; the message quotes it apart from the tail.
        assert "Why, in its words:\nSignal (11) received." in str(caught.value)
    assert our_leftovers() == {"processes": [], "segments": [], "folders": []}


def test_serve_raises_when_it_sees_the_crash_before_the_watcher_does():
    """serve() polls every `monitoring_period_s`, the supervisor every 0.25 s (and not while it
    heals a model): when serve() notices the dead server first, it must still raise, not return
    as after a signal (the script would exit 0)."""
    from support import running_triton

    from pytriton.exceptions import PyTritonServerCrashedError
    from pytriton.model_config import Tensor

    def identity(requests):
        return [{"y": request["x"]} for request in requests]

    def kill_when_up(triton) -> None:
        if wait_until(triton.is_connected, timeout_s=60):  # the start is complete
            server = [p for p in psutil.Process().children() if p.name() == "tritonserver"]
            server[0].kill()

    with running_triton() as triton:
        triton.bind("Identity", identity, inputs=[Tensor(name="x", dtype=np.float32, shape=(1,))],
                    outputs=[Tensor(name="y", dtype=np.float32, shape=(1,))])
        killer = threading.Thread(target=kill_when_up, args=(triton,), daemon=True)
        killer.start()
        started = time.monotonic()
        with pytest.raises(PyTritonServerCrashedError, match=r"signal 9 \(SIGKILL\)"):
            triton.serve(monitoring_period_s=0.01)  # it, not the supervisor, sees the death first
        assert time.monotonic() - started < 60
        killer.join()
    assert our_leftovers() == {"processes": [], "segments": [], "folders": []}


def _infer(base: str, seconds: float, outcome: dict, key: str) -> None:
    try:
        with ModelClient(base, "Sleep", init_timeout_s=5, inference_timeout_s=30) as client:
            outcome[key] = client.infer_sample(seconds=np.array([seconds], dtype=np.float32))["seconds"]
    except PyTritonClientError as exc:
        outcome[key] = exc


def _raw_infer(base: str, seconds: float) -> tuple:
    """POST one JSON inference request; (status, body text)."""
    import urllib.error
    import urllib.request

    body = json.dumps({"inputs": [{"name": "seconds", "shape": [1, 1], "datatype": "FP32", "data": [seconds]}]})
    request = urllib.request.Request(f"{base}/v2/models/Sleep/infer", data=body.encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:  # the server hung up: a refusal too, as long as it is quick
        return type(exc).__name__, str(exc)


def test_sigterm_drains_in_flight_requests_and_streams_then_exits_cleanly():
    script = ServingScript(exit_timeout_s=10)
    outcome: dict = {}
    try:
        request = threading.Thread(target=_infer, args=(script.base, 2.0, outcome, "in_flight"))
        request.start()

        def stream():
            tokens = []
            try:
                with DecoupledModelClient(f"grpc://127.0.0.1:{script.grpc}", "Tokens",
                                          inference_timeout_s=10) as client:
                    for response in client.infer_sample(count=np.array([6], dtype=np.int32),
                                                        seconds=np.array([0.3], dtype=np.float32)):
                        tokens.append(int(response["token"][0]))
            except PyTritonClientError as exc:
                outcome["stream_error"] = exc
            outcome["tokens"] = tokens

        streaming = threading.Thread(target=stream)
        streaming.start()
        time.sleep(0.5)
        script.root().send_signal(signal.SIGTERM)
        not_ready = wait_until(lambda: http_status(f"{script.base}/v2/health/ready") != 200, timeout_s=1.0,
                               interval_s=0.02)
        assert not_ready, "still ready after SIGTERM"
        # Readiness turns false first; the refusing models take over a moment later (their load:
        # milliseconds, over a second on a machine busy with other servers' starts). A request sent
        # in between is accepted and must be answered; from then on each is refused at once, by the
        # refusing models (test_drain_refusal.py checks their reason) or, once the drain is over,
        # by a server that has gone.
        first_sent = time.monotonic()
        accepted = []
        while True:
            late_sent = time.monotonic()
            outcome["late"] = _raw_infer(script.base, 0.0)
            assert time.monotonic() - late_sent < 2, "a request sent during the drain hung"
            if outcome["late"][0] != 200 or time.monotonic() - first_sent > 5.0:
                break
            accepted.append(outcome["late"])
            time.sleep(0.02)
        request.join(10)
        streaming.join(10)
        returncode, err = script.finish(timeout_s=20)
    finally:
        if script.process.poll() is None:
            script.kill()
    np.testing.assert_allclose(outcome["in_flight"], [2.0])  # finished, not cut
    assert outcome["tokens"] == [0, 1, 2, 3, 4, 5], outcome  # the stream got its time too
    assert outcome["late"][0] != 200, outcome["late"]  # refused, at the latest once the drain ended
    assert all('"data":[0.0]' in body for _, body in accepted), accepted  # those accepted before were answered
    assert returncode == 0, err[-2000:]
    assert _leftovers_of(f"pytriton-{script.info['pid']}-") == {"processes": [], "segments": []}


@pytest.mark.parametrize("path", ["backend", "proxy"])
def test_a_second_sigterm_during_the_drain_stops_at_once(path):
    """The process ends within a second of the second signal (0.56-0.92 s measured here, 1.6 s once
    on a loaded machine; pytriton is done after 0.27-0.44 s, the rest is Python's own exit), the
    callable still running left behind; the requests in flight hear
    from the server (UNAVAILABLE, retryable), not a closed connection. Before: 5.1 s (the stop
    waited 5 s for the callable's thread), and a closed connection."""
    script = ServingScript(exit_timeout_s=30, env=dict(os.environ, **PROXY_ENV) if path == "proxy" else None)
    outcome: dict = {}
    try:
        request = threading.Thread(target=_infer, args=(script.base, 20.0, outcome, "long"), daemon=True)
        request.start()
        stream = threading.Thread(target=_stream, args=(script.grpc, outcome), daemon=True)
        stream.start()
        time.sleep(0.5)
        root = script.root()
        root.send_signal(signal.SIGTERM)
        time.sleep(1.0)
        assert script.process.poll() is None, "the drain should still wait for the 20 s request"
        root.send_signal(signal.SIGTERM)
        second = time.monotonic()
        returncode, err = script.finish(timeout_s=15)
        took = time.monotonic() - second
        request.join(5)
        stream.join(5)
    finally:
        if script.process.poll() is None:
            script.kill()
    print(f"\n[{path}] the second signal ended the script in {took:.2f} s; in flight: {outcome}")
    assert took < 1.5, f"the script ended {took:.2f} s after the second signal"  # a loose bound: shared cores
    assert returncode == 0, err[-2000:]
    assert "Second signal" in err
    for key in ("long", "stream"):
        assert isinstance(outcome[key], PyTritonClientError), outcome
        assert "the server stopped at once, before this request was answered" in str(outcome[key]), outcome
    assert _leftovers_of(f"pytriton-{script.info['pid']}-") == {"processes": [], "segments": []}


def _stream(grpc_port: int, outcome: dict) -> None:
    """A long stream of Tokens: its tokens, or the error that ended it, in outcome["stream"]."""
    tokens = []
    try:
        with DecoupledModelClient(f"grpc://127.0.0.1:{grpc_port}", "Tokens", inference_timeout_s=30) as client:
            for response in client.infer_sample(count=np.array([100], dtype=np.int32),
                                                seconds=np.array([0.2], dtype=np.float32)):
                tokens.append(int(response["token"][0]))
        outcome["stream"] = tokens
    except PyTritonClientError as exc:
        outcome["stream"] = exc


def _can_unshare() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-p", "-f", "--mount-proc", "true"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="needs root and unshare for a PID namespace")
def test_as_pid_1_a_killed_stub_is_healed_and_sigterm_leaves_nothing_behind():
    script = ServingScript(wrapper=("unshare", "-p", "-f", "--mount-proc"), env=dict(os.environ, **PROXY_ENV))
    try:
        assert script.info["pid"] == 1
        segments = script.info["segments"]
        server_ids = {"-".join(name.split("-")[:3]) for name in segments}
        assert len(server_ids) == 1, segments
        (server_id,) = server_ids
        root = script.root()
        stubs = stub_processes("Sleep", root.pid)
        stubs[0].kill()
        assert wait_until(lambda: http_status(f"{script.base}/v2/models/Sleep/ready") != 200, timeout_s=2)
        assert wait_until(lambda: http_status(f"{script.base}/v2/models/Sleep/ready") == 200, timeout_s=10)
        outcome: dict = {}
        _infer(script.base, 0.0, outcome, "after")
        np.testing.assert_allclose(outcome["after"], [0.0])
        root.send_signal(signal.SIGTERM)
        returncode, err = script.finish(timeout_s=30)
    finally:
        if script.process.poll() is None:
            script.kill()
    assert returncode == 0, err[-2000:]
    left = sorted(name for name in os.listdir("/dev/shm") if name.startswith(server_id))
    assert left == [], f"segments of the PID-1 server left behind: {left}"
    assert _leftovers_of(server_id)["processes"] == []


@pytest.mark.parametrize(
    "as_pid_1, start",
    [(False, "serve"), (True, "serve"), (False, "run"), (True, "run"), (False, "bind"), (True, "bind")],
    ids=["serve", "serve-pid-1", "run-then-serve", "run-then-serve-pid-1", "bind-in-with", "bind-in-with-pid-1"],
)
def test_sigterm_while_the_models_load_stops_the_start_cleanly(as_pid_1, start):
    """The load runs in serve()'s start, in run()'s, or (the default policy) in bind() inside `with`."""
    if as_pid_1 and not _can_unshare():
        pytest.skip("needs root and unshare for a PID namespace")
    env = dict(os.environ, SERVING_SCRIPT_LOAD_S="6", SERVING_SCRIPT_RUN_FIRST="1" if start == "run" else "0",
               SERVING_SCRIPT_LATE_START="0" if start == "bind" else "1")
    wrapper = ("unshare", "-p", "-f", "--mount-proc") if as_pid_1 else ()
    script = ServingScript(exit_timeout_s=10, wrapper=wrapper, env=env, wait_ready=False)
    try:
        loading = wait_until(lambda: _loading(script, "Sleep"), timeout_s=60)
        assert loading, "the model never started loading"
        time.sleep(0.5)  # its warm-up (6 s) runs now: the model is loading, serve() not yet serving
        server_ids = {arg.split("-tpb")[0] for arg in loading if "-tpb" in arg}
        script.root().send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        returncode, err = script.finish(timeout_s=30)
        took = time.monotonic() - signalled
    finally:
        if script.process.poll() is None:
            script.kill()
    if start == "serve":
        assert returncode == 0, err[-2000:]  # serve(): a clean stop, neither death by SIGTERM nor a lost signal
    else:  # inside `with Triton()`: cleaned up, then SIGTERM ends the script with status 143, PID 1 or not
        assert returncode == 128 + signal.SIGTERM, err[-2000:]
    assert took < 20, f"stopping a loading server took {took:.1f} s"
    (server_id,) = server_ids
    assert _leftovers_of(server_id) == {"processes": [], "segments": []}
