"""KIP-630's rule for sharing one FetchSnapshot response's bytes among the partitions it names."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorum.raft.snapshot_bytes import spread_response_bytes


def test_one_partition_gets_what_it_has_left_up_to_the_budget():
    assert spread_response_bytes([5000], 1024) == [1024]
    assert spread_response_bytes([300], 1024) == [300]
    assert spread_response_bytes([0], 1024) == [0]


def test_equal_partitions_share_evenly():
    assert spread_response_bytes([1000, 1000, 1000, 1000], 400) == [100, 100, 100, 100]


def test_what_a_small_partition_does_not_use_goes_to_the_others():
    # Average 300; the first needs only 60, so the other two share the remaining 840.
    assert spread_response_bytes([60, 5000, 5000], 900) == [60, 420, 420]
    # Average 250: the two small ones leave 970 for the two large ones, which split it evenly.
    assert spread_response_bytes([5000, 10, 700, 20], 1000) == [485, 10, 485, 20]
    assert spread_response_bytes([5000, 10, 400, 20], 1000) == [570, 10, 400, 20]


def test_no_partition_is_cut_below_the_average_it_can_use():
    # Order does not matter: the answer is in the order of the request.
    assert spread_response_bytes([5000, 60, 5000], 900) == [420, 60, 420]
    assert spread_response_bytes([90, 5000], 100) == [50, 50]


def test_an_uneven_budget_differs_by_at_most_one_byte_and_is_used_up():
    assert sorted(spread_response_bytes([100, 100, 100], 10)) == [3, 3, 4]
    assert spread_response_bytes([100, 100, 100], 2) in ([0, 1, 1], [1, 0, 1], [1, 1, 0])


def test_nothing_to_share():
    assert spread_response_bytes([], 1024) == []
    assert spread_response_bytes([10, 20], 0) == [0, 0]


@pytest.mark.parametrize("remaining, budget", [([-1], 10), ([10], -1)])
def test_negative_input_is_refused(remaining, budget):
    with pytest.raises(ValueError):
        spread_response_bytes(remaining, budget)


@given(remaining=st.lists(st.integers(0, 10_000), max_size=12), budget=st.integers(0, 40_000))
def test_the_spec_rule_holds_for_any_partitions(remaining, budget):
    sent = spread_response_bytes(remaining, budget)
    assert len(sent) == len(remaining)
    # Never more than a partition has left, never more than the response may carry in all.
    assert all(0 <= s <= r for s, r in zip(sent, remaining, strict=True))
    assert sum(sent) <= budget
    # Rule 1: at least the average of ResponseMaxBytes when the snapshot has that many bytes left.
    if remaining:
        average = budget // len(remaining)
        assert all(s >= min(r, average) for s, r in zip(sent, remaining, strict=True))
    # Rule 2: bytes a partition does not need go to the others, so none is left on the table.
    assert sum(sent) == min(budget, sum(remaining))
    # Evenly: a partition that was cut short got no less (but for rounding) than any other.
    cut_short = [s for s, r in zip(sent, remaining, strict=True) if s < r]
    if cut_short:
        assert max(sent) - min(cut_short) <= 1
