"""The parts of `make bench` (bench/) that need no server: cases, arguments, the reference's
hand-written repository, the docs blocks, and the GPU path's refusal where torch sees no GPU."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
import torch

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import cases  # noqa: E402
import cpu_work  # noqa: E402
import gpu  # noqa: E402
import report  # noqa: E402
import run  # noqa: E402
import servers  # noqa: E402


def test_cases_and_targets():
    targets = {case.key: case.target for case in cases.CASES}
    assert targets == {
        "small_c1": 1.00, "small_c16": 1.10, "small_c64": 1.20, "large_c8": 1.00, "sleep_c64": 1.00,
        "cpu_c16": 0.95, "huge_c4": 1.00, "stream_c8": 1.00,
    }  # fmt: skip
    assert not [case.key for case in cases.CASES if case.max_extra_latency_ms]
    assert {case.key: case.target for case in cases.GPU_CASES} == {"gpu_c1": 1.00, "gpu_c32": 1.00}
    by_key = {case.key: case for case in cases.CASES}
    assert (by_key["huge_c4"].values * 4, by_key["huge_c4"].concurrency) == (16 * 2**20, 4)
    assert by_key["stream_c8"].protocols == ("grpc",) and by_key["stream_c8"].streaming
    assert (by_key["cpu_c16"].model, by_key["cpu_c16"].concurrency) == ("cpu_5ms", 16)
    assert run.STARTUP_TARGET_S == 0.30
    assert {case.model for case in cases.CASES} <= set(servers.MODELS)
    assert {case.model for case in cases.GPU_CASES} <= set(servers.TORCH_MODELS)
    assert [case.concurrency for case in cases.GPU_CASES] == [1, 32]


def test_arguments_select_cases_and_the_gpu_path():
    args = run.parse_args(["--cases", "stream_c8", "cpu_c16", "--protocols", "grpc"])
    assert [case.key for case in args.cases] == ["cpu_c16", "stream_c8"] and not args.gpu
    assert args.out.name == "results.json"
    args = run.parse_args(["--gpu"])
    assert [case.key for case in args.cases] == ["gpu_c1", "gpu_c32"]
    assert (args.torch_device, args.out.name, args.plot.name) == ("cuda", "results-gpu.json", "performance-gpu.png")
    assert [case.key for case in run.parse_args(["--gpu", "--cases", "gpu_c32"]).cases] == ["gpu_c32"]


@pytest.mark.parametrize("argv, message", [
    (["--cases", "gpu_c1"], "GPU cases run only with --gpu"),
    (["--gpu", "--cases", "small_c1"], "not a case of --gpu"),
])  # fmt: skip
def test_arguments_refuse_cases_of_the_other_path(argv, message, capsys):
    with pytest.raises(SystemExit):
        run.parse_args(argv)
    assert message in capsys.readouterr().err


def test_reference_repository_declares_what_ours_declares(tmp_path):
    servers.write_reference_repository(tmp_path, loop_count=1234)
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(servers.MODELS)
    cpu = (tmp_path / "cpu_5ms" / "config.pbtxt").read_text()
    assert "instance_group { count: 2 kind: KIND_CPU }" in cpu and 'string_value: "1234"' in cpu
    stream = (tmp_path / "stream_100" / "config.pbtxt").read_text()
    assert "decoupled: true" in stream and 'key: "steps" value { string_value: "100" }' in stream
    assert "class TritonPythonModel" in (tmp_path / "stream_100" / "1" / "model.py").read_text()
    assert "response_sender" in (tmp_path / "stream_100" / "1" / "model.py").read_text()
    identity = (tmp_path / "identity" / "config.pbtxt").read_text()
    assert "decoupled: false" in identity and 'key: "loop_count" value { string_value: "0" }' in identity
    assert (tmp_path / "identity" / "1" / "cpu_work.py").is_file()


def test_reference_repository_of_the_gpu_path(tmp_path):
    servers.write_reference_repository(tmp_path, loop_count=1, torch_device="cuda")
    assert [path.name for path in tmp_path.iterdir()] == ["torch_mlp"]
    assert 'key: "device" value { string_value: "cuda" }' in (tmp_path / "torch_mlp" / "config.pbtxt").read_text()
    assert "import torch" in (tmp_path / "torch_mlp" / "1" / "model.py").read_text()
    assert (tmp_path / "torch_mlp" / "1" / "torch_mlp.py").is_file()


def test_cpu_work_calibration_gives_a_positive_count():
    count = cpu_work.calibrate(0.001, probe=2000, repeats=3)
    assert count > 0 and cpu_work.spin(count) >= 0


def test_docs_blocks_are_replaced_separately(tmp_path):
    page = tmp_path / "performance.md"
    page.write_text(f"intro\n\n{report.BEGIN}\nold cpu\n{report.END}\n\nmiddle\n\n{report.GPU_BEGIN}\nold gpu\n"
                    f"{report.GPU_END}\n\nend\n")
    results = {
        "machine": {"date": "d", "nproc": 2, "cpu_model": "c", "memory_gib": 1, "kernel": "k", "python": "3",
                    "loadavg_at_start": [0.0, 0.0, 0.0]},
        "settings": {"revision": "r", "triton_server": "t", "perf_analyzer": "p", "interval_ms": 3000, "rounds": 1},
        "gpu": {"name": "NVIDIA H100", "memory_gib": 79.6, "capability": "9.0", "torch": "2", "cuda": "12",
                "device": "cuda", "outputs_check": {"torch_tensor": {"max_abs_difference": 0.0},
                                                    "numpy": {"max_abs_difference": 0.0}}},
        "cases": [], "duration_s": 300.0,
    }  # fmt: skip
    report.update_docs(results, page, "performance-gpu.png", gpu=True)
    text = page.read_text()
    assert "old cpu" in text and "old gpu" not in text and "GPU: NVIDIA H100, 79.6 GiB" in text
    assert text.startswith("intro") and "middle" in text and text.rstrip().endswith("end")


def test_gpu_path_refuses_clearly_without_a_gpu_and_starts_nothing():
    if torch.cuda.is_available():  # on a GPU machine the path runs (make bench-gpu); here: what it would see
        info = gpu.device_info("cuda")
        assert info["name"] and info["memory_gib"] > 0
        return
    result = subprocess.run([sys.executable, str(REPO / "bench" / "run.py"), "--gpu", "--no-docs"],
                            capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "--gpu refused" in result.stderr and "torch.cuda.is_available() is False" in result.stderr
    assert "start-up" not in result.stderr


def test_the_revision_is_marked_for_changed_code_and_not_for_the_bench_own_pages(tmp_path):
    def git(*argv: str) -> None:
        subprocess.run(["git", *argv], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "performance.md").write_text("before\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", ".")
    git("-c", "user.name=bench", "-c", "user.email=bench@example.invalid", "commit", "-qm", "first")
    head = report.git_revision(tmp_path)
    assert head and "+" not in head and head != "unknown"
    (tmp_path / "docs" / "performance.md").write_text("a bench wrote its page\n")
    assert report.git_revision(tmp_path) == head
    (tmp_path / "code.py").write_text("x = 2\n")
    assert report.git_revision(tmp_path) == f"{head}+uncommitted changes"


def test_the_multiplexing_case_measures_against_an_ideal_lru_of_the_same_trace():
    import multiplex

    assert multiplex.ideal_lru_hit_rate([0, 1, 0, 2, 1, 0], capacity=2, measured_from=0) == 1 / 6  # only 0 at 2
    assert multiplex.ideal_lru_hit_rate([0, 1, 0, 1, 0, 1], capacity=2, measured_from=2) == 1.0
    trace = multiplex.zipf_trace(20_000, seed=7)
    assert trace == multiplex.zipf_trace(20_000, seed=7) and set(trace) <= set(range(multiplex.VARIANTS))
    share = trace.count(0) / len(trace)
    assert 0.21 < share < 0.25  # rank 1 of Zipf(1.1) over 100: 23 % of the requests
    lru8 = multiplex.ideal_lru_hit_rate(trace, 8, 0)
    assert 0.35 < lru8 < multiplex.ideal_lru_hit_rate(trace, 16, 0) < 0.7
    assert multiplex._asks("top8", [0, 9, 7]) == [("top_0", None), ("top_7", None)]
    assert multiplex._asks("mux", [0, 42]) == [("mux", "v000"), ("mux", "v042")]


def test_the_multiplexing_case_is_in_a_full_run_and_reported_round_by_round():
    import multiplex

    assert run.parse_args([]).multiplex and not run.parse_args(["--quick"]).multiplex
    assert run.parse_args(["--cases", "multiplex_c16"]).cases == []
    figures = {"throughput": 100.0, "latency_p50_ms": 10.0, "latency_p99_ms": 50.0, "requests": 3000,
               "server_cpu_ms_per_request": 2.5}
    row = {"ideal_lru_8": 0.42, "ideal_lru_16": 0.6, "loadavg": [2.0, 2.0, 2.0], "order": list(multiplex.CONFIGS),
           "mux": {**figures, "throughput": 140.0, "hit_rate": 0.45, "loads": 1650, "load_mean_ms": 6.1},
           "lru": {**figures, "hit_rate": 0.41, "loads": 1770}, "top8": figures}
    results = {"variants": 100, "zipf_s": 1.1, "max_loaded": 8, "instances": 2, "concurrency": 16, "dim": 1024,
               "rank": 16, "warmup_requests": 600, "requests": 3000, "rounds": [row, row],
               "throughput_ratio": 1.4, "hit_rate_gap": -0.03, "hit_rate_gap_16": 0.15, "cpu_ratio": 1.2,
               "met": {"hit_rate": True, "throughput": True}}
    table = multiplex.markdown(results)
    assert table.count("| mux |") == 2 and "1650 (6.1)" in table
    assert "1.40x (target >= 1.3x: met)" in table and "+3.0 points from the ideal LRU of max_loaded=8" in table
    assert "-15.0 points from the ideal LRU of both instances' 16" in table and "lru/mux (median) 1.20x" in table
