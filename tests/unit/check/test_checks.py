"""The pure parts of `pytriton check`: verdict lines, glibc parsing, and each decision."""

from __future__ import annotations

import errno
import pathlib

import pytest

from pytriton.check.install import (
    judge_glibc,
    judge_libpython,
    judge_numpy,
    judge_stub_libraries,
    parse_glibc_version,
    parse_ldd,
)
from pytriton.check.runtime import judge_ports, judge_shm
from pytriton.check.verdicts import CheckResult, Verdict, exit_status, format_result
from pytriton.ipc.shm import MIB

LDD = """\
\tlinux-vdso.so.1 (0x00007ffc2a5f6000)
\tlibcudart-09529672.so.12.6.77 => /srv/tritonserver/lib/libcudart-09529672.so.12.6.77 (0x00007f0a1c000000)
\tlibpython3.11.so.1.0 => /opt/py/lib/libpython3.11.so.1.0 (0x00007f0a1b800000)
\tlibstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007f0a1b400000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f0a1c600000)
"""


def test_a_passing_line_has_the_verdict_name_and_detail_and_no_remedy():
    line = format_result(CheckResult("glibc", Verdict.PASS, "glibc 2.36", "never shown"), name_width=9)
    assert line == "PASS  glibc:     glibc 2.36"


def test_a_failing_line_carries_its_remedy_on_the_same_line():
    line = format_result(CheckResult("ports", Verdict.FAIL, "port 8000 is\nin use", "stop it"))
    assert line == "FAIL  ports: port 8000 is in use -- fix: stop it"
    assert "\n" not in line


def test_a_warning_does_not_fail_but_a_failure_does():
    passed = CheckResult("a", Verdict.PASS, "")
    warned = CheckResult("b", Verdict.WARN, "")
    assert exit_status([passed, warned]) == 0
    assert exit_status([passed, warned, CheckResult("c", Verdict.FAIL, "")]) == 1


@pytest.mark.parametrize(
    "text, expected",
    [("glibc 2.36", (2, 36)), ("glibc 2.35", (2, 35)), ("2.31", (2, 31)), ("glibc 2.4", (2, 4)),
     ("", None), (None, None), ("musl", None)],
)
def test_glibc_versions_are_parsed_from_confstr_text(text, expected):
    assert parse_glibc_version(text) == expected


def test_glibc_2_35_and_newer_pass_older_fail_with_a_base_image_remedy():
    assert judge_glibc((2, 35), bundled=True).verdict is Verdict.PASS
    assert judge_glibc((2, 36), bundled=True).verdict is Verdict.PASS
    old = judge_glibc((2, 31), bundled=True)
    assert old.verdict is Verdict.FAIL
    assert "2.31" in old.detail and "2.35" in old.detail and "Debian 12" in old.remedy


def test_glibc_minor_versions_compare_as_numbers_not_text():
    assert judge_glibc((2, 4), bundled=True).verdict is Verdict.FAIL  # "2.4" > "2.35" as text


def test_no_glibc_fails_for_the_bundled_server():
    assert judge_glibc(None, bundled=True).verdict is Verdict.FAIL
    assert "musl" in judge_glibc(None, bundled=True).detail


def test_an_own_server_is_not_held_to_the_bundled_glibc():
    assert judge_glibc((2, 31), bundled=False).verdict is Verdict.PASS


def test_a_static_python_fails_the_libpython_check_with_the_remedy():
    result = judge_libpython("built without a shared libpython", None, False)
    assert result.verdict is Verdict.FAIL and "--enable-shared" in result.remedy


def test_a_shared_libpython_whose_file_is_missing_fails():
    library = pathlib.Path("/opt/py/lib/libpython3.11.so.1.0")
    assert judge_libpython(None, library, True).verdict is Verdict.PASS
    missing = judge_libpython(None, library, False)
    assert missing.verdict is Verdict.FAIL and str(library) in missing.detail


def test_ldd_output_is_read_into_resolved_and_missing_libraries():
    libraries = parse_ldd(LDD + "\tlibb64.so.0d => not found\n")
    assert libraries["libpython3.11.so.1.0"] == "/opt/py/lib/libpython3.11.so.1.0"
    assert libraries["libb64.so.0d"] is None
    assert "linux-vdso.so.1" not in libraries  # no "=>": nothing to resolve


def _same(path: str) -> str:
    return path


def test_stub_libraries_pass_when_libpython_is_this_interpreters():
    result = judge_stub_libraries(parse_ldd(LDD), pathlib.Path("/opt/py/lib"), realpath=_same)
    assert result.verdict is Verdict.PASS
    assert "/opt/py/lib/libpython3.11.so.1.0" in result.detail


def test_stub_libraries_fail_on_the_system_libpython_of_another_build():
    trap = LDD.replace("/opt/py/lib/libpython", "/lib/x86_64-linux-gnu/libpython")
    result = judge_stub_libraries(parse_ldd(trap), pathlib.Path("/opt/py/lib"), realpath=_same)
    assert result.verdict is Verdict.FAIL
    assert "/lib/x86_64-linux-gnu/libpython3.11.so.1.0" in result.detail and "/opt/py/lib" in result.remedy


def test_stub_libraries_fail_naming_what_is_missing():
    result = judge_stub_libraries(parse_ldd(LDD + "\tlibfoo.so.1 => not found\n"), pathlib.Path("/opt/py/lib"),
                                  realpath=_same)
    assert result.verdict is Verdict.FAIL and "libfoo.so.1" in result.detail


@pytest.mark.parametrize("version, verdict", [("1.26.4", Verdict.PASS), ("1.24.4", Verdict.PASS),
                                              ("2.0.0", Verdict.FAIL), ("2.4.6", Verdict.FAIL),
                                              (None, Verdict.FAIL)])
def test_the_stub_needs_numpy_1(version, verdict):
    result = judge_numpy(version, "somewhere", python=(3, 12))
    assert result.verdict is verdict
    if verdict is Verdict.FAIL:
        assert "numpy<2" in result.remedy


@pytest.mark.parametrize("version", ["2.4.6", None])
def test_on_python_313_the_stub_numpy_line_says_no_numpy_1_exists_and_asks_for_none(version):
    result = judge_numpy(version, "this environment's", python=(3, 13))
    assert result.verdict is Verdict.FAIL
    assert "NumPy 1.x, which has no release for Python 3.13, so the proxy path cannot serve" in result.detail
    assert "numpy<2" not in result.remedy and "install" not in result.remedy
    assert "Python 3.8 to 3.12" in result.remedy and "pytriton's own backend" in result.remedy


def test_a_stub_that_links_the_servers_own_libpython_copy_is_said_so():
    ldd = "\tlibpython3-419a3a08.13.so.1.0 => /srv/tritonserver/lib/libpython3-419a3a08.13.so.1.0 (0x1)\n"
    result = judge_stub_libraries(parse_ldd(ldd), pathlib.Path("/opt/py/lib"), realpath=_same,
                                  server_libdirs=[pathlib.Path("/srv/tritonserver/lib")])
    assert result.verdict is Verdict.FAIL
    assert result.detail.startswith("the stub would load the server's own copy of libpython "
                                    "(/srv/tritonserver/lib/libpython3-419a3a08.13.so.1.0, renamed when")


def test_where_pytritons_backend_serves_what_only_the_proxy_path_needs_is_an_info_with_no_fix():
    from pytriton.check.install import proxy_only

    failed = judge_numpy("2.4.6", "this environment's", python=(3, 13))
    info = proxy_only(failed)
    assert info.verdict is Verdict.INFO
    assert info.detail.startswith("pytriton's own backend serves here and runs no Python-backend stub; only the proxy "
                                  'path (TritonConfig(model_backend="python")) would need this: the stub would import')
    line = format_result(info)
    assert line.startswith("INFO  stub numpy: pytriton's own backend serves here") and "fix:" not in line
    assert " -- for the proxy path, run Python 3.8 to 3.12" in line
    warned = proxy_only(CheckResult("stub libraries", Verdict.WARN, "ldd is not installed", "install ldd"))
    assert warned.verdict is Verdict.INFO and warned.remedy == "for the proxy path: install ldd"
    assert exit_status([info, warned]) == 0
    for untouched in (CheckResult("stub numpy", Verdict.PASS, "NumPy 1.26.4"), CheckResult("ports", Verdict.FAIL, "")):
        assert proxy_only(untouched) is untouched


def test_the_proxy_path_chosen_keeps_its_stub_failures():
    import dataclasses

    from pytriton.check.install import native_serves
    from pytriton.server.distribution import ServerDistribution

    root = pathlib.Path("/srv/tritonserver")
    built = ServerDistribution(root, root / "bin" / "tritonserver", root / "backends" / "python", None,
                               root / "caches", (), native_backend=root / "backends" / "pytriton" / "lib.so")
    assert native_serves(built, None) and native_serves(built, "pytriton")
    assert not native_serves(built, "python") and not native_serves(built, " Python ")
    assert not native_serves(dataclasses.replace(built, native_backend=None), None)


def test_a_roomy_shm_passes():
    assert judge_shm(1024 * MIB, 1000 * MIB, writable=True).verdict is Verdict.PASS


def test_dockers_default_shm_warns_with_the_shm_size_fix():
    result = judge_shm(64 * MIB, 63 * MIB, writable=True)
    assert result.verdict is Verdict.WARN
    assert "64.0 MiB" in result.detail and "--shm-size=256m" in result.remedy


def test_a_large_but_full_shm_warns_about_free_space():
    result = judge_shm(1024 * MIB, 100 * MIB, writable=True)
    assert result.verdict is Verdict.WARN and "100.0 MiB is free" in result.detail


def test_a_read_only_shm_fails():
    assert judge_shm(1024 * MIB, 1000 * MIB, writable=False).verdict is Verdict.FAIL


def test_free_ports_pass_and_list_the_endpoints():
    result = judge_ports([("http_port", None, 8000, None), ("grpc_port", None, 8001, None)])
    assert result.verdict is Verdict.PASS and "8000 (http)" in result.detail and "8001 (grpc)" in result.detail


def test_a_busy_port_fails_naming_the_port_and_the_variable_that_moves_it():
    result = judge_ports([("http_port", None, 8000, None), ("metrics_port", "127.0.0.1", 8002, errno.EADDRINUSE)])
    assert result.verdict is Verdict.FAIL
    assert "port 8002 (metrics_port) is already in use on 127.0.0.1" in result.detail
    assert "PYTRITON_TRITON_CONFIG_METRICS_PORT=<port>" in result.remedy
    assert "HTTP_PORT" not in result.remedy


def test_a_privileged_port_fails_with_its_own_reason():
    result = judge_ports([("http_port", None, 80, errno.EACCES)])
    assert result.verdict is Verdict.FAIL and "privileges" in result.detail


def test_ports_read_from_a_script_without_running_it():
    from pytriton.check.runtime import config_from_script

    source = (
        "import os\nfrom pytriton.triton import Triton, TritonConfig\n"
        "config = TritonConfig(http_port=9000, grpc_port=int(os.environ['G']), allow_metrics=False, log_verbose=1)\n"
        "with Triton(config=config) as t:\n    t.serve()\n"
    )
    assert config_from_script(source) == ({"http_port": 9000, "allow_metrics": False}, ["grpc_port"])
    assert config_from_script("print('no server here')\n") == ({}, [])
    with pytest.raises(SyntaxError):
        config_from_script("def (:\n")


def test_a_busy_port_names_its_holder_and_where_the_ports_came_from():
    result = judge_ports([("http_port", None, 9000, errno.EADDRINUSE)], "serve.py sets http_port=9000",
                         {9000: "pid 42 (python other.py)"})
    assert result.detail == ("port 9000 (http_port) is already in use on all interfaces by pid 42 (python other.py) "
                             "(serve.py sets http_port=9000)")


def test_the_summary_words_a_busy_port_as_what_it_is():
    from pytriton.check.runtime import summary
    from pytriton.check.verdicts import CheckResult, Verdict

    ok = CheckResult("glibc", Verdict.PASS, "")
    ports = CheckResult("ports", Verdict.FAIL, "")
    tree = CheckResult("server tree", Verdict.FAIL, "")
    assert summary([ok, ok]) == "pytriton check: 2 PASS"
    assert summary([ok, ports]) == ("pytriton check: 1 PASS, 1 FAIL -- a port the server would take is in use; on "
                                    "other ports this machine can serve")
    assert summary([ports, tree]).endswith("-- this machine cannot serve yet")
    assert summary([ok, CheckResult("stub numpy", Verdict.INFO, "")]) == "pytriton check: 1 PASS, 1 INFO"


def test_the_versions_line_names_the_library_the_server_and_python(tmp_path):
    from pytriton import __version__
    from pytriton.check.runtime import versions_line
    from pytriton.server.distribution import server_version

    line = versions_line()
    assert line.startswith(f"pytriton {__version__}, Triton Inference Server ") and ", Python 3." in line
    (tmp_path / "VERSION").write_text("nvidia-pytriton==0.7.0 triton-server=2.51.0 sha256=abc\n")
    assert server_version(tmp_path) == "2.51.0"
    (tmp_path / "VERSION").unlink()
    (tmp_path / "TRITON_VERSION").write_text("2.52.0\n")
    assert server_version(tmp_path) == "2.52.0"
    (tmp_path / "TRITON_VERSION").unlink()
    assert server_version(tmp_path) is None


# --- metrics and tracing ----------------------------------------------------------------------


def test_observability_says_where_metrics_and_traces_go():
    from pytriton.check.runtime import judge_observability

    off = judge_observability(None, [], True, None)
    assert off.verdict is Verdict.PASS and "metrics off" in off.detail and "tracing off" in off.detail
    file = judge_observability(8002, ["triton,file=/tmp/t.json", "rate=1"], False, None)
    assert file.verdict is Verdict.PASS and "port 8002" in file.detail and "/tmp/t.json" in file.detail
    otel = ["mode=opentelemetry", "opentelemetry,url=http://collector:4318/v1/traces?x=1"]
    fine = judge_observability(8002, otel, True, None)
    assert fine.verdict is Verdict.PASS and "http://collector:4318/v1/traces?x=1" in fine.detail
    missing = judge_observability(8002, otel, False, None)
    assert missing.verdict is Verdict.WARN and "pytriton[telemetry]" in missing.remedy
    down = judge_observability(8002, otel, True, "collector:4318: Connection refused")
    assert down.verdict is Verdict.WARN and "Connection refused" in down.detail


def test_observability_check_tries_the_collector(monkeypatch):
    import socket

    from pytriton.check.runtime import check_observability

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        items = f"mode=opentelemetry;opentelemetry,url=http://127.0.0.1:{port}/v1/traces"
        reached = check_observability({"PYTRITON_TRITON_CONFIG_TRACE_CONFIG": items})
    refused = check_observability({"PYTRITON_TRITON_CONFIG_TRACE_CONFIG": items})
    assert "does not answer" not in reached.detail, reached
    assert refused.verdict is Verdict.WARN and "does not answer" in refused.detail, refused


def test_the_port_check_takes_the_openai_port_too(tmp_path):
    import socket

    from pytriton.check.runtime import check_ports

    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        script = tmp_path / "serve.py"
        script.write_text(f"from pytriton.triton import TritonConfig\nconfig = TritonConfig(openai_port={port})\n")
        result = check_ports({}, script)
    assert result.verdict is Verdict.FAIL, result
    assert f"port {port} (openai_port) is already in use" in result.detail
    assert "PYTRITON_TRITON_CONFIG_OPENAI_PORT=<port>" in result.remedy
