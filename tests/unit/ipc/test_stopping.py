"""The stopping flag (pytriton/ipc/stopping.py): written lowered, raised once, seen through a
mapping made before the raise, as the backend and the proxy map it at load."""

from __future__ import annotations

from pytriton.ipc.stopping import FLAG_BYTES, FlagView, create_flag, raise_flag, refusal


def test_a_mapping_made_before_the_raise_sees_it(tmp_path):
    path = tmp_path / "stopping"
    create_flag(path)
    assert path.read_bytes() == bytes(FLAG_BYTES)
    view = FlagView.open(str(path))
    assert view is not None and not view.raised()
    raise_flag(path)
    assert view.raised()
    create_flag(path)  # the next start of a workspace the user chose lowers it again
    assert not view.raised()


def test_no_path_or_no_file_means_nothing_is_refused(tmp_path):
    assert FlagView.open(None) is None
    assert FlagView.open("") is None
    assert FlagView.open(str(tmp_path / "missing")) is None


def test_the_refusal_names_the_model_and_says_to_retry():
    text = refusal("Sleepy")
    assert "Model 'Sleepy'" in text and "stopping" in text and "again" in text
