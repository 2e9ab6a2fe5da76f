"""`pytriton check`'s GPU line: the judging of given facts (this machine has no GPU), the facts
this machine gives (torch without CUDA: a PASS that says no GPU was seen), and where the line
stands among the checks (after /dev/shm, only when the running container is checked)."""

from __future__ import annotations

import importlib.util

import pytest

from pytriton.check import runtime as checks
from pytriton.check.runtime import GPU_DRIVER_NEEDED, NO_GPU, judge_gpu, parse_nvidia_smi
from pytriton.check.verdicts import CheckResult, Verdict

SMI_TWO_L4 = "560.35.03, NVIDIA L4\n560.35.03, NVIDIA L4\n"


def test_nvidia_smi_lines_are_read_per_device():
    assert parse_nvidia_smi(SMI_TWO_L4) == [("560.35.03", "NVIDIA L4")] * 2
    assert parse_nvidia_smi("550.54.15, NVIDIA A100-SXM4-80GB\n") == [("550.54.15", "NVIDIA A100-SXM4-80GB")]
    # What nvidia-smi prints without a driver is no version.
    failed = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
    assert parse_nvidia_smi(failed) == []
    assert parse_nvidia_smi("") == []


def test_no_gpu_is_a_pass_that_says_so():
    result = judge_gpu([], None, None)
    assert result == CheckResult("gpu", Verdict.PASS, NO_GPU)
    assert NO_GPU == "no GPU seen (torch absent or no CUDA)"


@pytest.mark.parametrize(
    "driver, verdict",
    [
        ("560.35.03", Verdict.PASS),  # CUDA 12.6 Update 2's minimum (NVIDIA's release notes)
        ("560.35.05", Verdict.PASS),
        ("570.86.15", Verdict.PASS),
        ("580.65.06", Verdict.PASS),
        ("560.28.03", Verdict.WARN),  # 12.6 GA's minimum: older than the bundled libcudart 12.6.77 needs
        ("535.183.01", Verdict.WARN),  # R535: only with the forward-compatibility package
        ("470.256.02", Verdict.WARN),
    ],
)
def test_the_driver_is_judged_against_cuda_12_6(driver, verdict):
    result = judge_gpu(["NVIDIA L4"], driver, "12.4")
    assert result.name == "gpu" and result.verdict is verdict, result
    assert f"driver {driver}" in result.detail and "CUDA runtime 12.4 (torch)" in result.detail
    assert "NVIDIA L4" in result.detail
    if verdict is Verdict.WARN:
        assert GPU_DRIVER_NEEDED == "560.35.03" and f">= {GPU_DRIVER_NEEDED}" in result.remedy
        assert "forward-compatibility" in result.remedy


def test_gpu_names_are_counted_and_an_unknown_driver_is_a_warning():
    result = judge_gpu(["NVIDIA H100 80GB HBM3"] * 8, "570.124.06", "12.8")
    assert result.verdict is Verdict.PASS
    assert result.detail == "8 x NVIDIA H100 80GB HBM3; driver 570.124.06; CUDA runtime 12.8 (torch)"
    unknown = judge_gpu(["NVIDIA L4"], None, "12.4")
    assert unknown.verdict is Verdict.WARN and "unknown" in unknown.detail and unknown.remedy
    mixed = judge_gpu(["NVIDIA L4", "NVIDIA T4"], "560.35.03", None)
    assert mixed.detail.startswith("NVIDIA L4, NVIDIA T4;") and "CUDA runtime unknown" in mixed.detail


def test_this_machine_has_no_gpu_and_the_check_passes_saying_so():
    result = checks.check_gpu()
    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU: the judging tests above cover the verdicts")
    assert result == CheckResult("gpu", Verdict.PASS, NO_GPU)


def test_check_gpu_reads_torch_and_nvidia_smi(monkeypatch):
    # The facts gathered, with torch and nvidia-smi replaced by what a GPU node gives.
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: "NVIDIA L4")
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(checks.shutil, "which", lambda name: "/usr/bin/nvidia-smi" if name == "nvidia-smi" else None)

    class Answer:
        stdout = SMI_TWO_L4

    asked = []
    monkeypatch.setattr(checks.subprocess, "run", lambda argv, **kwargs: asked.append(argv) or Answer())
    result = checks.check_gpu()
    assert asked == [["/usr/bin/nvidia-smi", "--query-gpu=driver_version,name", "--format=csv,noheader"]]
    assert result == CheckResult("gpu", Verdict.PASS, "2 x NVIDIA L4; driver 560.35.03; CUDA runtime 12.4 (torch)")


def _stub_checks(monkeypatch):
    """Every check of run_checks replaced by one that returns its own name, to see the order."""
    for function in ("check_glibc", "check_libpython", "check_shm", "check_gpu", "check_workspace"):
        name = function[len("check_"):]
        monkeypatch.setattr(checks, function, lambda name=name: CheckResult(name, Verdict.PASS, ""))
    monkeypatch.setattr(checks, "check_ports", lambda script=None: CheckResult("ports", Verdict.PASS, ""))
    monkeypatch.setattr(checks, "check_observability",
                        lambda script=None: CheckResult("observability", Verdict.PASS, ""))

    def no_server():
        raise checks.PyTritonError("no server tree here")

    monkeypatch.setattr(checks, "find_distribution", no_server)


def test_the_gpu_line_follows_dev_shm_in_a_running_container_only(monkeypatch):
    _stub_checks(monkeypatch)
    names = [result.name for result in checks.run_checks()]
    assert names.index("gpu") == names.index("shm") + 1, names
    assert "gpu" not in [result.name for result in checks.run_checks(build=True)]  # an image build has no GPU
