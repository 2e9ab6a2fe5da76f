"""The closed readiness gate a server without models starts with (pure functions, no server)."""

from __future__ import annotations

from pytriton.server.argv import build_argv
from pytriton.server.config import TritonConfig
from pytriton.server.readiness import GATE_MODEL, closed_gate_config, startup_config


def test_the_closed_gate_names_a_backend_no_server_has():
    text = closed_gate_config()
    assert f'name: "{GATE_MODEL}"' in text
    assert 'backend: "pytriton_readiness_gate_closed"' in text


def test_a_default_start_writes_the_closed_gate_and_keeps_the_server_up_through_its_failure(tmp_path):
    config, folder = startup_config(TritonConfig(), tmp_path)
    assert folder == tmp_path / GATE_MODEL
    assert (tmp_path / GATE_MODEL / "config.pbtxt").read_text() == closed_gate_config()
    assert (tmp_path / GATE_MODEL / "1").is_dir()
    argv = build_argv(config, binary=tmp_path / "tritonserver", model_repository=tmp_path, backend_directory=tmp_path,
                      cache_directory=tmp_path, shm_region_prefix="p")
    assert "--exit-on-error=false" in argv


def test_exit_on_error_asked_for_keeps_the_repository_empty_and_the_flag(tmp_path):
    asked = TritonConfig(exit_on_error=True)
    config, folder = startup_config(asked, tmp_path)
    assert folder is None and config is asked
    assert not (tmp_path / GATE_MODEL).exists()
