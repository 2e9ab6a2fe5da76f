"""The OpenAI-compatible front's own process: started and stopped with the server, restarted when
killed, gone with its serving process, serving models of process instances, and Triton's ports
kept on localhost behind it.

Every test starts the real tritonserver and the front's real process; what a user sees is what
is asserted: the front's answers, its pid and command line, the log, the sockets that listen.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest
from support import free_ports, http_status, our_leftovers, server_config, wait_until

from pytriton.exceptions import PyTritonServerError
from pytriton.server.security import TritonSecurityConfig
from pytriton.triton import Triton

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.functional

closed_at: dict = {}


def chat(messages, params):
    tag = params.get("tag")
    try:
        for index in range(params.get("count", 2)):
            if params.get("delay"):
                time.sleep(params["delay"])
            yield f"{tag}-{index} "
    finally:
        closed_at[tag] = time.monotonic()


def _front(pid: int = None) -> psutil.Process:
    """The one front process under `pid` (default: this process)."""
    found = [child for child in psutil.Process(pid or os.getpid()).children()
             if "pytriton.openai.front" in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE]
    assert len(found) == 1, found
    return found[0]


def _client(port, key="unused"):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0, timeout=30)


def test_the_front_runs_in_a_process_of_its_own_that_stop_ends(caplog):
    (port,) = free_ports(1)
    triton = Triton(config=server_config(openai_port=port))
    caplog.set_level(logging.DEBUG, logger="pytriton.openai")
    try:
        triton.bind_chat(model_name="own-chat", infer_func=chat)
        triton.run()
        front = _front()
        assert front.pid != os.getpid() and front.cmdline()[0] == sys.executable
        assert "from pytriton.openai.front import main" in " ".join(front.cmdline())
        # Its command line carries this process's mark, so a search for a server's leftovers finds it.
        assert f"pytriton-{os.getpid()}-" in " ".join(front.cmdline())
        # In a session of its own: a Ctrl+C in the terminal reaches the serving process, which stops it in order.
        assert os.getsid(front.pid) == front.pid != os.getsid(0)
        answer = _client(port).chat.completions.create(model="own-chat", messages=[{"role": "user", "content": "x"}],
                                                       extra_body={"tag": "own"})
        assert answer.choices[0].message.content == "own-0 own-1 "
    finally:
        triton.stop()
    assert not front.is_running() or front.status() == psutil.STATUS_ZOMBIE
    assert http_status(f"http://127.0.0.1:{port}/health") == "URLError"  # the port is closed
    # Closed in order after the drain: not killed with the server's leftovers, nor started again.
    said = [r.getMessage() for r in caplog.records if r.name == "pytriton.openai"]
    assert f"the OpenAI-compatible API's process (pid {front.pid}) exited with code 0 after its close" in said, said
    assert not [line for line in said if "starting it again" in line]
    assert our_leftovers() == {"processes": [], "segments": [], "folders": []}


def test_a_killed_front_is_started_again_and_the_log_says_so(caplog):
    (port,) = free_ports(1)
    triton = Triton(config=server_config(openai_port=port))
    try:
        triton.bind_chat(model_name="kill-chat", infer_func=chat)
        triton.run()
        first = _front()
        outcome: dict = {}

        def long_stream():
            try:
                stream = _client(port).chat.completions.create(
                    model="kill-chat", messages=[{"role": "user", "content": "x"}], stream=True,
                    extra_body={"tag": "killed", "count": 1000, "delay": 0.02})
                for chunk in stream:
                    outcome.setdefault("first", chunk)
            except Exception as exc:  # noqa: BLE001 - what the client sees is the test's finding
                outcome["error"] = exc

        reader = threading.Thread(target=long_stream)
        with caplog.at_level(logging.WARNING, logger="pytriton.openai"):
            reader.start()
            assert wait_until(lambda: "first" in outcome, 30.0), outcome  # the stream is under way
            first.kill()
            reader.join(30)
            # The client's stream broke off; the request it had in Triton was cancelled, and the callable closed.
            assert "error" in outcome, outcome
            assert wait_until(lambda: "killed" in closed_at, 10.0), "the killed front's request still runs"
            # A new process serves the port again.
            assert wait_until(lambda: http_status(f"http://127.0.0.1:{port}/health") == 200, 60.0, 0.1)
        second = _front()
        assert second.pid != first.pid
        answer = _client(port).chat.completions.create(model="kill-chat", messages=[{"role": "user", "content": "x"}],
                                                       extra_body={"tag": "after"})
        assert answer.choices[0].message.content == "after-0 after-1 "
        said = [r.getMessage() for r in caplog.records if r.name == "pytriton.openai"]
        assert any(f"(pid {first.pid}) killed by signal 9 (SIGKILL); starting it again on port {port}" in line
                   for line in said), said
        assert triton.is_alive()
    finally:
        triton.stop()
    assert our_leftovers() == {"processes": [], "segments": [], "folders": []}


def test_a_front_that_keeps_dying_stops_the_server(monkeypatch):
    import pytriton.openai.process as front_process

    monkeypatch.setattr(front_process, "RESTARTS", 1)
    (port,) = free_ports(1)
    triton = Triton(config=server_config(openai_port=port))
    try:
        triton.bind_chat(model_name="dying-chat", infer_func=chat)
        triton.run()
        _front().kill()
        assert wait_until(lambda: http_status(f"http://127.0.0.1:{port}/health") == 200, 60.0, 0.1)
        _front().kill()  # the second end within the window: given up
        assert wait_until(lambda: not triton.is_alive(), 30.0), "the server serves on without its front"
        with pytest.raises(PyTritonServerError, match="OpenAI-compatible API's process ended more than 1 times"):
            triton.bind_chat(model_name="more-chat", infer_func=chat)
    finally:
        triton.stop()
    assert our_leftovers() == {"processes": [], "segments": [], "folders": []}


SCRIPT = textwrap.dedent("""
    import sys, time
    from pytriton.triton import Triton, TritonConfig

    def chat(messages, params):
        for index in range(params.get("count", 2)):
            time.sleep(params.get("delay", 0))
            yield f"{index} "

    http, grpc, metrics, front = (int(word) for word in sys.argv[1:5])
    config = TritonConfig(http_port=http, grpc_port=grpc, metrics_port=metrics, openai_port=front,
                          exit_timeout_secs=10)
    with Triton(config=config) as triton:
        triton.bind_chat(model_name="script-chat", infer_func=chat)
        triton.serve()
""")


def _script(tmp_path):
    ports = free_ports(4)
    path = tmp_path / "serve_chat.py"
    path.write_text(SCRIPT)
    process = subprocess.Popen([sys.executable, str(path), *map(str, ports)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    front_port = ports[3]
    if not wait_until(lambda: http_status(f"http://127.0.0.1:{front_port}/health") == 200, 120.0, 0.1):
        process.kill()
        pytest.fail(f"the script did not serve: {process.communicate()[1][-3000:]}")
    return process, front_port


def _leftovers_of(pid):
    marker = f"pytriton-{pid}-"
    return [p.pid for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]


def test_the_front_dies_with_its_serving_process(tmp_path):
    process, _ = _script(tmp_path)
    front = _front(process.pid)
    process.kill()  # kill -9: no stop() runs
    process.wait()
    assert wait_until(lambda: not front.is_running() or front.status() == psutil.STATUS_ZOMBIE, 10.0), \
        "the front outlived its serving process"
    assert wait_until(lambda: _leftovers_of(process.pid) == [], 10.0), _leftovers_of(process.pid)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_process_group_lets_the_fronts_streams_finish_then_leaves_nothing(tmp_path, signum):
    process, port = _script(tmp_path)
    front = _front(process.pid)
    pieces: list = []

    def stream():
        chunks = _client(port).chat.completions.create(
            model="script-chat", messages=[{"role": "user", "content": "x"}], stream=True,
            extra_body={"count": 6, "delay": 0.2})
        pieces.extend(c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content)

    reader = threading.Thread(target=stream)
    reader.start()
    time.sleep(0.5)
    os.killpg(process.pid, signum)  # as a terminal's Ctrl+C, or a stop of the whole group, does
    reader.join(30)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr[-3000:]
    assert pieces == [f"{k} " for k in range(6)], (pieces, stderr[-2000:])
    assert not front.is_running() or front.status() == psutil.STATUS_ZOMBIE
    assert _leftovers_of(process.pid) == []


def test_triton_on_localhost_keeps_tritons_ports_on_this_machine_behind_the_front():
    (port,) = free_ports(1)
    config = server_config(openai_port=port, triton_on_localhost=True)
    key = "front-door-key"
    with Triton(config=config, security_config=TritonSecurityConfig(openai_api_key=key)) as triton:
        triton.bind_chat(model_name="door-chat", infer_func=chat)
        listening = {c.laddr.port: c.laddr.ip.replace("::ffff:", "") for c in psutil.net_connections("inet")
                     if c.status == psutil.CONN_LISTEN and c.laddr.port in (config.http_port, config.grpc_port, port)}
        assert listening == {config.http_port: "127.0.0.1", config.grpc_port: "127.0.0.1", port: "0.0.0.0"}
        answer = _client(port, key).chat.completions.create(model="door-chat",
                                                            messages=[{"role": "user", "content": "x"}],
                                                            extra_body={"tag": "door"})
        assert answer.choices[0].message.content == "door-0 door-1 "
        with pytest.raises(openai.AuthenticationError):
            _client(port, "wrong").models.list()
        # Health needs no key; it is ready once Triton is (a start inside `with` opens after the binds).
        assert wait_until(lambda: http_status(f"http://127.0.0.1:{port}/health") == 200, 30.0)


def _pid_chat(messages, params):
    yield f"{os.getpid()}"


def _pid_embed(texts):
    return [[float(os.getpid())] for _ in texts]


def test_models_of_process_instances_are_served_through_the_front():
    from pytriton.model_config import ModelConfig

    (port,) = free_ports(1)
    with Triton(config=server_config(openai_port=port)) as triton:
        triton.bind_chat(model_name="forked-chat", infer_func=_pid_chat,
                         config=ModelConfig(batching=False, process_instances=True))
        triton.bind_embeddings(model_name="forked-embed", infer_func=_pid_embed,
                               config=ModelConfig(max_batch_size=8, process_instances=True))
        client = _client(port)
        answered = client.chat.completions.create(model="forked-chat", messages=[{"role": "user", "content": "x"}])
        streamed = "".join(chunk.choices[0].delta.content or "" for chunk in client.chat.completions.create(
            model="forked-chat", messages=[{"role": "user", "content": "x"}], stream=True) if chunk.choices)
        embedded = client.embeddings.create(model="forked-embed", input="x").data[0].embedding
        workers = {int(answered.choices[0].message.content), int(streamed), int(embedded[0])}
        front = _front().pid
        assert not workers & {os.getpid(), front}, workers  # answered in the worker processes
    assert our_leftovers() == {"processes": [], "segments": [], "folders": []}
