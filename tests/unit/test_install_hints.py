"""The pip line for the full package, read off pytriton-client's ``direct_url.json`` (pure)."""

from __future__ import annotations

import json

from pytriton.install_hints import GENERIC_FULL_PACKAGE, full_package_hint


def test_a_client_built_from_a_checkout_names_that_checkout():
    recorded = json.dumps({"url": "file:///home/me/my%20pytriton/pytriton-client", "dir_info": {}})
    hint = full_package_hint(recorded, isfile=lambda path: path == "/home/me/my pytriton/pyproject.toml")
    assert hint == "install it from the checkout this one came from: pip install '/home/me/my pytriton'"


def test_a_checkout_that_is_gone_gets_both_forms():
    recorded = json.dumps({"url": "file:///gone/pytriton/pytriton-client", "dir_info": {}})
    assert full_package_hint(recorded, isfile=lambda path: False) == GENERIC_FULL_PACKAGE


def test_a_client_from_the_git_url_names_the_same_url_at_the_same_commit():
    recorded = json.dumps({"url": "https://example.com/org/pytriton.git", "subdirectory": "pytriton-client",
                           "vcs_info": {"vcs": "git", "commit_id": "0123abc", "requested_revision": "main"}})
    assert full_package_hint(recorded) == (
        'install it from the same git URL: pip install "pytriton @ git+https://example.com/org/pytriton.git@0123abc"')


def test_a_wheel_file_an_index_or_nothing_recorded_gets_both_forms():
    wheel = json.dumps({"url": "file:///tmp/dist/pytriton_client-0.1.0-py3-none-any.whl", "archive_info": {}})
    for recorded in (wheel, None, "", "not json", "[1, 2]", json.dumps({"url": 3})):
        assert full_package_hint(recorded, isfile=lambda path: True) == GENERIC_FULL_PACKAGE
    assert "pip install /path/to/pytriton" in GENERIC_FULL_PACKAGE
    assert 'pip install "pytriton @ git+<the repository\'s URL>"' in GENERIC_FULL_PACKAGE
