"""The reliability harness (harness/) in its short forms, so that it cannot rot.

`make soak`, `make fuzz` and `make clients` run the same programs with their full counts. Here
each runs as a child process with small counts and must pass its own criteria; with a bug
planted in the user process (``--fault``) it must fail, so the criteria are shown to bite.
Known bugs the harness found are kept as strict xfails (harness/README.md).

The short soak's growth limit is looser than the full run's 5 %: 2,000 requests take about
4 s, so each mark's value comes from about 3 samples, and a single 4 MiB payload in flight moves
a sample by tens of percent. (pytriton's shared-memory arenas, which follow the sizes of their
last messages, are judged by their stated bound instead, in the short run as in the full one.)
It still requires every request answered correctly and the return to baseline,
except that tritonserver's own RSS may stay up to twice its baseline: its heap keeps what the
4 MiB payloads made it take (83 -> 107 MiB after 2,000 requests in one run, 126 -> 130 in
another); the full run judges it at 10 % (and reports it, harness/README.md). Other RSS may
stay 25 % above (not 10 %): the stub that maps Triton's shared-memory pool grows with the pool's
high-water mark, which a 1,000-request rehearsal does not always reach (72.5 -> 81.5 MiB in one
run). The planted-leak run has no rehearsal, so that the leak is not in its baseline.
"""

from __future__ import annotations

import http.client
import json
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.functional

HARNESS = pathlib.Path(__file__).resolve().parents[3] / "harness"
sys.path.insert(0, str(HARNESS))

from soak import ARENA_CEILING  # noqa: E402


def run_harness(script: str, tmp_path: pathlib.Path, *args: str, timeout_s: float = 150) -> tuple:
    out = tmp_path / f"{script}.json"
    result = subprocess.run(
        [sys.executable, str(HARNESS / script), "--json", str(out), *args],
        capture_output=True, text=True, timeout=timeout_s, check=False,
    )  # fmt: skip
    report = f"stdout:\n{result.stdout[-6000:]}\nstderr:\n{result.stderr[-3000:]}"
    figures = json.loads(out.read_text()) if out.exists() else {}
    return result.returncode, figures, report


@pytest.mark.timeout(200)
def test_short_soak_answers_every_request_and_returns_to_baseline(tmp_path):
    plot = tmp_path / "soak.png"
    # Growth between the marks is judged by `make soak`'s long run, not here: in a load of about 3 s
    # each mark is the median of a few samples. What this test names (every request answered, the
    # arenas within their bound, every metric back at its baseline) is checked exactly.
    code, figures, report = run_harness(
        "soak.py", tmp_path, "--requests", "2000", "--plot", str(plot), "--growth-limit", "1.5", "--settle-s", "20",
        "--server-rss-tolerance", "1.0",
    )  # fmt: skip
    assert code == 0, report
    assert (figures["ok"], figures["lost"], figures["mixed"], figures["errors"]) == (2000, 0, 0, 0), report
    assert len(figures["per_lane"]) == 8  # every client flavour over both protocols took part
    assert all(check["back_ok"] for check in figures["metrics"].values()), report
    arenas = figures["metrics"]["shm_arenas"]
    assert arenas["load_ok"] and 0 < arenas["load_max"] <= ARENA_CEILING, report  # the arenas were used, within bound
    assert figures["metrics"]["arena_extra_segments"]["load_max"] == 0, report
    assert figures["leftovers"] == {"processes": [], "segments": []}
    assert plot.stat().st_size > 10_000


@pytest.mark.timeout(200)
def test_soak_fails_when_an_arena_keeps_the_segments_it_replaces(tmp_path):
    code, figures, report = run_harness(
        "soak.py", tmp_path, "--requests", "1000", "--plot", "", "--fault", "arenaleak", "--settle-s", "3",
        "--rehearsal", "0", "--burst-rounds", "0",
    )
    assert code == 1, report
    extra = figures["metrics"]["arena_extra_segments"]
    assert not extra["load_ok"] and extra["load_max"] > 0, report  # an arena with more than one segment
    assert any(failure.startswith("arena_extra_segments was") for failure in figures["failures"]), report


@pytest.mark.timeout(200)
def test_soak_fails_when_the_user_process_leaks(tmp_path):
    code, figures, report = run_harness(
        "soak.py", tmp_path, "--requests", "1000", "--plot", "", "--fault", "leak", "--settle-s", "3",
        "--rehearsal", "0", "--burst-rounds", "0",  # the planted leak must not be part of the baseline
    )
    assert code == 1, report
    fds = figures["metrics"]["fds"]
    # One file kept open per call: the count stays up by about one per call after the clients
    # close. (It also rises between the 50 % and 100 % marks, but a load of 1.5 s leaves the
    # sampler few samples there: in one CI run both marks read the same value.)
    assert not fds["back_ok"] and fds["after"] > fds["baseline"] + 100, report
    assert any("fds" in failure for failure in figures["failures"]), report


@pytest.mark.timeout(150)
def test_short_fuzz_gets_only_errors_or_right_answers_and_the_server_lives(tmp_path):
    code, figures, report = run_harness("fuzz.py", tmp_path, "--examples", "300", "--settle-s", "10")
    assert code == 0, report
    assert sum(figures["categories"].values()) == 300
    assert figures["controls"] >= 300 + 2 * 160  # one after each example, plus two cool-downs
    assert figures["live"] is True and figures["failures"] == []
    # Most examples are malformed: errors dominate, and some requests still succeed.
    errors = sum(count for category, count in figures["categories"].items() if not category.startswith("ok"))
    assert errors > 150 and figures["categories"].get("ok (valid request)", 0) > 0, figures["categories"]


@pytest.mark.timeout(150)
def test_fuzz_fails_when_answers_are_mixed_up(tmp_path):
    code, figures, report = run_harness("fuzz.py", tmp_path, "--examples", "150", "--fault", "mixup")
    assert code == 1, report
    assert any("got int64" in failure or "control request" in failure for failure in figures["failures"]), report


@pytest.fixture(scope="module")
def client_cycles(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("clients")
    code, figures, report = run_harness("clients.py", tmp_path, "--cycles", "10", "--settle-s", "3")
    return {(run["client"], run["protocol"]): run for run in figures["runs"]}, report


_CASES = [
    (client, protocol)
    for client in ["ModelClient", "FuturesModelClient", "AsyncioModelClient", "DecoupledModelClient",
                   "AsyncioDecoupledModelClient"]
    for protocol in ["http", "grpc"]
]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("client, protocol", _CASES)
def test_client_cycles_leave_no_fd_or_thread(client_cycles, client, protocol):
    runs, report = client_cycles
    run = runs[client, protocol]
    assert run["wrong"] == 0, report
    assert run["after"]["fds"] <= run["before"]["fds"], report
    assert run["after"]["threads"] <= run["before"]["threads"], report


@pytest.mark.timeout(120)
@pytest.mark.xfail(strict=True, reason="tritonserver 2.51 SIGSEGVs on an HTTP JSON tensor whose shape declares "
                   "more than memory holds (it allocates the declared size before reading the data)")
def test_server_survives_a_json_tensor_declaring_2_40_elements():
    sys.path.insert(0, str(HARNESS))
    from common import UserProcess

    with UserProcess() as user:
        user.wait_ready()
        body = json.dumps({"inputs": [
            {"name": "x", "datatype": "FP32", "shape": [2**40], "data": [1.0]},
            {"name": "text", "datatype": "BYTES", "shape": [1], "data": ["a"]},
        ]})  # fmt: skip
        connection = http.client.HTTPConnection("127.0.0.1", user.http_port, timeout=20)
        try:
            connection.request("POST", "/v2/models/text/infer", body, {"Content-Type": "application/json"})
            status = connection.getresponse().status
        except (ConnectionError, http.client.HTTPException):
            status = None
        finally:
            connection.close()
        assert status == 400 and user.is_live()
