"""The lock (constraints.txt, build_backend/lock.py): every requirement of both distributions is
pinned, every pin is a version pyproject's range admits (else pip refuses the install), and the
environment that runs this suite is the locked one, so a release upstream changes nothing here
until `make lock` moves the pins.
"""

from __future__ import annotations

import importlib.metadata
import pathlib
import sys
from typing import Dict, List

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = pathlib.Path(__file__).resolve().parents[2]
tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the suite runs there


@pytest.fixture(scope="module")
def lock():
    sys.path.insert(0, str(ROOT / "build_backend"))
    try:
        import lock

        yield lock
    finally:
        sys.path.remove(str(ROOT / "build_backend"))


def _requirements() -> List[Requirement]:
    """What both pyproject files ask for (dependencies, every extra, the build's), ours left out."""
    found = []
    for pyproject in (ROOT / "pyproject.toml", ROOT / "pytriton-client" / "pyproject.toml"):
        data = tomllib.loads(pyproject.read_text())
        lines = data["project"]["dependencies"] + data["build-system"]["requires"]
        lines += [line for extra in data["project"].get("optional-dependencies", {}).values() for line in extra]
        found += [Requirement(line) for line in lines]
    return [r for r in found if canonicalize_name(r.name) not in {"pytriton", "pytriton-client"}]


def _outside_their_range(pins: Dict[str, str], requirements: List[Requirement]) -> List[str]:
    """Each requirement the pins leave unpinned or pin outside its range, said as pip would fail."""
    problems = []
    for requirement in requirements:
        if requirement.marker and not requirement.marker.evaluate():
            continue  # not asked for on this interpreter, so not locked for it either
        name = canonicalize_name(requirement.name)
        if name not in pins:
            problems.append(f"{name} is not pinned in constraints.txt")
        elif not requirement.specifier.contains(pins[name], prereleases=True):
            problems.append(f"constraints.txt pins {name}=={pins[name]}, outside pyproject.toml's {requirement}")
    return problems


def test_every_requirement_is_pinned_within_pyprojects_range(lock):
    locked_for, pins = lock.read()
    assert locked_for, "constraints.txt does not say which interpreter it is for"
    requirements = _requirements()
    assert {"numpy", "tritonclient", "pyzmq", "pytest", "setuptools", "aiohttp"} <= {
        canonicalize_name(r.name) for r in requirements}
    assert _outside_their_range(pins, requirements) == []
    assert "torch" in pins  # make install's TORCH_SPEC, for the examples


def test_the_range_check_catches_a_pin_outside_the_range_and_a_missing_pin():
    requirements = [Requirement("numpy<2"), Requirement("sh>=2"), Requirement("typing_inspect")]
    problems = _outside_their_range({"numpy": "2.4.6", "sh": "2.4.0"}, requirements)
    assert problems == ["constraints.txt pins numpy==2.4.6, outside pyproject.toml's numpy<2",
                        "typing-inspect is not pinned in constraints.txt"]


def test_the_lock_names_each_package_once_by_its_canonical_name(lock, tmp_path):
    text = (ROOT / "constraints.txt").read_text()
    names = [line.partition("==")[0] for line in text.splitlines() if line and not line.startswith("#")]
    assert names == sorted(set(names)) and all(name == canonicalize_name(name) for name in names)
    # read() folds spellings, and a local build label never enters the lock.
    fake = tmp_path / "constraints.txt"
    fake.write_text("# for: cpython-3.11 linux-x86_64\nTyping_Inspect==0.9.0\n")
    assert lock.read(fake) == ("cpython-3.11 linux-x86_64", {"typing-inspect": "0.9.0"})
    assert "+" not in text


def test_the_lock_leaves_out_the_distributions_built_here(lock):
    asked = lock.requirements("torch==2.13.0")
    assert "torch==2.13.0" in asked and not [line for line in asked if line.startswith("pytriton")]
    _, pins = lock.read()
    assert not {"pytriton", "pytriton-client"} & set(pins)


def test_the_environment_running_the_suite_is_the_locked_one(lock):
    locked_for, pins = lock.read()
    if locked_for != lock.target():
        pytest.skip(f"the lock is for {locked_for}; on {lock.target()} make install takes pyproject's ranges")
    differ = []
    for name, pinned in pins.items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            differ.append(f"{name}: not installed, {pinned} pinned")
            continue
        if installed.split("+")[0] != pinned:
            differ.append(f"{name}: {installed} installed, {pinned} pinned")
    assert differ == [], "run `make install` (the lock moved) or `make lock` (to move it)"
