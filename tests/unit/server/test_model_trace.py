"""`bind(..., trace_config=...)` items -> Triton's per-model trace settings (pure function)."""

import pytest

from pytriton.exceptions import PyTritonBadParameterError
from pytriton.server.model_trace import model_trace_settings


def test_items_become_tritons_per_model_settings():
    items = ["level=TIMESTAMPS", "level=tensors", "rate=10", "count=-1", "log-frequency=5"]
    assert model_trace_settings("M", items) == {
        "trace_level": ["TIMESTAMPS", "TENSORS"],
        "trace_rate": "10",
        "trace_count": "-1",
        "log_frequency": "5",
    }


def test_none_and_empty_mean_no_settings():
    assert model_trace_settings("M", None) is None
    assert model_trace_settings("M", []) is None


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (["level=LOUD"], r"'level=LOUD' has a bad value; level must be one of OFF, TIMESTAMPS, TENSORS"),
        (["rate=0"], r"rate must be an integer >= 1"),
        (["count=-2"], r"count must be an integer >= -1"),
        (["log_frequency=x"], r"log_frequency must be an integer >= 0"),
        (["file=/tmp/t.json"], r"the trace file and mode are the server's"),
        (["TIMESTAMPS"], r"is not '<setting>=<value>'"),
        ([3], r"is not '<setting>=<value>'"),
        ("rate=1", r"must be a list of '<setting>=<value>' strings"),
    ],
)
def test_a_bad_item_is_refused_naming_model_and_item(items, message):
    with pytest.raises(PyTritonBadParameterError, match=message) as info:
        model_trace_settings("Traced", items)
    assert "trace_config of model 'Traced'" in str(info.value)
