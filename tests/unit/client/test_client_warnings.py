"""pytriton.client.warnings: the published warning categories import and filter as usual."""

from __future__ import annotations

import warnings

from pytriton.client.warnings import NotSupportedTimeoutWarning, PyTritonWarning


def test_categories_are_user_warnings():
    assert issubclass(NotSupportedTimeoutWarning, PyTritonWarning)
    assert issubclass(PyTritonWarning, UserWarning)


def test_a_filter_on_the_category_silences_it_and_nothing_else():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=NotSupportedTimeoutWarning)
        warnings.warn("timeout ignored", NotSupportedTimeoutWarning, stacklevel=1)
        warnings.warn("other", PyTritonWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["other"]
