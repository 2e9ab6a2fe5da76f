"""Failure isolation inside a batch: `isolate` pins each failure to its own requests."""

import math

import pytest

from pytriton.exceptions import PyTritonUnrecoverableError
from pytriton.worker.isolation import isolate


class Poison(Exception):
    pass


class Timeout(Exception):
    pass


def _model(poison, calls):
    """A callable over request indices: fails with the smallest poison index it sees."""

    def call(indices):
        calls.append(tuple(indices))
        bad = sorted(set(indices) & set(poison))
        if bad:
            raise Poison(f"poison {bad[0]} in {list(indices)}")
        return [index * 10 for index in indices]

    return call


def _run(count, poison, **predicates):
    calls = []
    call = _model(poison, calls)
    try:
        call(range(count))
        raise AssertionError("the whole batch should fail")
    except Poison as first:
        groups = isolate(count, call, first, may_split=predicates.get("may_split", lambda e: True),
                         must_stop=predicates.get("must_stop", lambda e: False))
    return groups, calls[1:]


def _per_index(groups):
    answers = {}
    for indices, answer, error in groups:
        for position, index in enumerate(indices):
            assert index not in answers, f"index {index} covered twice"
            answers[index] = error if error is not None else answer[position]
    return answers


def test_one_poison_among_seventeen_fails_alone_and_the_others_get_their_answers():
    groups, calls = _run(17, {11})
    answers = _per_index(groups)
    assert sorted(answers) == list(range(17))
    assert [i for i, a in answers.items() if isinstance(a, Exception)] == [11]
    assert str(answers[11]) == "poison 11 in [11]"  # the error of its own smallest group
    assert all(answers[i] == i * 10 for i in range(17) if i != 11)
    assert len(calls) <= 2 * 1 * math.ceil(math.log2(17))


def test_groups_come_out_in_index_order():
    groups, _ = _run(10, {2, 7})
    flat = [index for group in groups for index in group.indices]
    assert flat == list(range(10))


@pytest.mark.parametrize("count, poison", [(2, {0}), (2, {1}), (8, {0, 7}), (32, {3, 4, 30}), (33, set(range(33)))])
def test_only_poison_fails_and_calls_stay_within_2_k_log2_n(count, poison):
    groups, calls = _run(count, poison)
    answers = _per_index(groups)
    assert {i for i, a in answers.items() if isinstance(a, Exception)} == poison
    assert len(calls) <= 2 * len(poison) * math.ceil(math.log2(count))


def test_error_that_may_not_split_keeps_its_group_whole():
    calls = []

    def call(indices):
        calls.append(tuple(indices))
        if 5 in indices:
            raise Timeout("too slow")
        return list(indices)

    groups = isolate(8, call, Poison("first"), may_split=lambda e: not isinstance(e, Timeout),
                     must_stop=lambda e: False)
    answers = _per_index(groups)
    assert [i for i, a in answers.items() if isinstance(a, Timeout)] == [4, 5, 6, 7]  # not split further
    assert calls == [(0, 1, 2, 3), (4, 5, 6, 7)]


def test_first_error_that_may_not_split_makes_no_call():
    groups = isolate(4, lambda indices: pytest.fail("called"), Timeout("slow"), may_split=lambda e: False,
                     must_stop=lambda e: False)
    assert [(tuple(g.indices), type(g.error)) for g in groups] == [((0, 1, 2, 3), Timeout)]


def test_unrecoverable_error_stops_the_search_and_untried_groups_keep_their_parents_error():
    calls = []

    def call(indices):
        calls.append(tuple(indices))
        if 0 in indices:
            raise PyTritonUnrecoverableError("broken")
        return list(indices)

    first = Poison("whole batch")
    groups = isolate(8, call, first, may_split=lambda e: True,
                     must_stop=lambda e: isinstance(e, PyTritonUnrecoverableError))
    assert calls == [(0, 1, 2, 3)]  # never called again once it said it is broken
    answers = _per_index(groups)
    assert all(isinstance(answers[i], PyTritonUnrecoverableError) for i in range(4))
    assert all(answers[i] is first for i in range(4, 8))


def test_single_request_batch_is_not_retried():
    error = Poison("alone")
    groups = isolate(1, lambda indices: pytest.fail("called"), error, may_split=lambda e: True,
                     must_stop=lambda e: False)
    assert groups == [((0,), None, error)]


def test_flaky_group_that_succeeds_on_retry_gets_its_answers():
    """A batch-level failure (e.g. out of memory on the large batch) that no smaller group repeats."""
    groups = isolate(6, lambda indices: [i + 100 for i in indices], Poison("too large"), may_split=lambda e: True,
                     must_stop=lambda e: False)
    assert _per_index(groups) == {i: i + 100 for i in range(6)}
