"""Every test file has a name of its own: pytest imports test modules by their base name (the suite
has no packages), so two files of one name stop the whole run at collection ("import file
mismatch"), which a run of one folder never shows."""

from __future__ import annotations

import collections
import pathlib

TESTS = pathlib.Path(__file__).resolve().parents[1]


def test_no_two_test_files_share_a_name():
    paths = collections.defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        paths[path.name].append(str(path.relative_to(TESTS)))
    assert len(paths) > 100
    assert {name: found for name, found in paths.items() if len(found) > 1} == {}
