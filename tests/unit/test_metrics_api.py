"""`pytriton.metrics` (what a callable records) and the proxy's arithmetic that turns the worker's
cumulative values into Triton metric updates (`pytriton.proxy.metrics`): pure functions."""

from __future__ import annotations

import math

import pytest

from pytriton.exceptions import PyTritonBadParameterError, PyTritonInvalidOperationError
from pytriton.ipc import protocol
from pytriton.metrics import Counter, Gauge, Histogram, Registry, set_current_registry
from pytriton.proxy.metrics import bound_label, counter_increment, histogram_series


@pytest.fixture()
def registry():
    registry = Registry("m", 2, 1)
    token = set_current_registry(registry)
    yield registry
    set_current_registry(None)
    del token


def _report(registry):
    return {name: dict(series) for name, _, _, _, series in registry.report()}


def test_values_are_recorded_per_instance_with_its_labels(registry):
    tokens = Counter("t_tokens_total", "tokens", labelnames=("phase",))
    size = Gauge("t_cache", "cache size")
    length = Histogram("t_len", "lengths", buckets=(1, 4))
    tokens.labels(phase="decode").inc(3)
    tokens.labels("decode").inc()
    tokens.labels(phase="prefill").inc(2.5)
    size.set(10)
    size.dec(4)
    for observed in (0.5, 1, 2, 4, 9):
        length.observe(observed)
    report = _report(registry)
    base = (("model", "m"), ("version", "2"), ("instance", "1"))
    assert report["t_tokens_total"] == {(*base, ("phase", "decode")): 4.0, (*base, ("phase", "prefill")): 2.5}
    assert report["t_cache"] == {base: 6.0}
    # per bucket (not cumulative): <=1: 0.5 and 1; <=4: 2 and 4; +Inf: 9; then the sum and the count
    assert report["t_len"] == {base: (2.0, 2.0, 1.0, 16.5, 5.0)}
    encoded = protocol.decode(protocol.encode(protocol.MetricsReport(registry.report(), 7)))
    assert encoded.worker_pid == 7 and len(encoded.families) == 3


def test_misuse_is_refused_with_what_is_expected(registry):
    counter = Counter("t_c_total", "c", labelnames=("a",))
    with pytest.raises(PyTritonBadParameterError, match=r"expected exactly \['a'\]"):
        counter.labels(b=1)
    with pytest.raises(PyTritonBadParameterError, match=r"record through \.labels"):
        counter.inc()
    with pytest.raises(PyTritonBadParameterError, match="can only grow"):
        counter.labels(a=1).inc(-1)
    with pytest.raises(PyTritonInvalidOperationError, match="has no set"):
        counter.labels(a=1).set(3)
    with pytest.raises(PyTritonBadParameterError, match="not a Prometheus name"):
        Gauge("1bad", "x")
    with pytest.raises(PyTritonBadParameterError, match="starts with pytriton_"):
        Gauge("pytriton_mine", "x")
    with pytest.raises(PyTritonBadParameterError, match="increasing"):
        Histogram("t_h", "x", buckets=(2, 1))
    Gauge("t_twice", "a gauge").set(1)
    with pytest.raises(PyTritonBadParameterError, match="defined twice"):
        Counter("t_twice", "a counter").inc()


def test_outside_a_callable_recording_says_where_it_belongs():
    with pytest.raises(PyTritonInvalidOperationError, match="outside an inference callable"):
        Counter("t_out_total", "x").inc()


def test_histogram_series_are_prometheus_buckets():
    labels = (("model", "m"),)
    series = histogram_series("h", (0.5, 1.0), labels, (1.0, 2.0, 3.0, 7.5, 6.0))
    assert series == (
        ("h_bucket", (("model", "m"), ("le", "0.5")), 1.0),
        ("h_bucket", (("model", "m"), ("le", "1")), 3.0),
        ("h_bucket", (("model", "m"), ("le", "+Inf")), 6.0),
        ("h_sum", labels, 7.5),
        ("h_count", labels, 6.0),
    )
    assert [bound_label(b) for b in (0.005, 5e-05, 16, 2.5, math.inf)] == ["0.005", "5e-05", "16", "2.5", "+Inf"]


@pytest.mark.parametrize(
    ("last", "current", "start", "expected"),
    [
        (None, 5.0, 0.0, 5.0),  # first sight, Triton has nothing yet
        (None, 5.0, 3.0, 2.0),  # first sight after a heal: Triton kept what the dead stub pushed
        (None, 2.0, 3.0, 0.0),  # never backwards
        (4.0, 9.0, 0.0, 5.0),  # growth since the last report
        (9.0, 2.0, 0.0, 2.0),  # the worker's values restarted
    ],
)
def test_counter_increments(last, current, start, expected):
    assert counter_increment(last, current, start) == expected
