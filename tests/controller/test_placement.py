"""Striped replica placement without racks: distinct replicas, leaders round-robin, seeded determinism."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorum.controller.placement import place_replicas
from quorum.controller.results import ApiError
from quorum.wire.errors import ErrorCode


def test_same_seed_same_placement_whatever_the_broker_order() -> None:
    first = place_replicas([1, 2, 3, 4], 10, 3, random.Random(7))
    again = place_replicas([4, 3, 2, 1, 2], 10, 3, random.Random(7))
    assert first == again
    assert len(first) == 10


def test_leaders_round_robin_within_each_round() -> None:
    brokers = [1, 2, 3, 4, 5]
    placed = place_replicas(brokers, 10, 2, random.Random(1))
    for start in (0, 5):
        assert sorted(replicas[0] for replicas in placed[start:start + 5]) == brokers
    assert Counter(replicas[0] for replicas in placed) == dict.fromkeys(brokers, 2)


def test_a_round_stripes_consecutive_brokers() -> None:
    placed = place_replicas([1, 2, 3], 3, 3, random.Random(3))
    order = list(placed[0])
    for k, replicas in enumerate(placed):
        assert list(replicas) == order[k:] + order[:k]


def test_single_broker() -> None:
    assert place_replicas([9], 4, 1, random.Random(0)) == [(9,)] * 4


@pytest.mark.parametrize(("brokers", "factor", "text"), [
    ([1, 2], 3, "only 2 broker(s) are registered and unfenced"),
    ([], 1, "All brokers are currently fenced."),
    ([1], 0, "the replication factor must be positive"),
])
def test_refused(brokers: list[int], factor: int, text: str) -> None:
    with pytest.raises(ApiError) as info:
        place_replicas(brokers, 1, factor, random.Random(0))
    assert info.value.code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert text in (info.value.message or "")


@given(brokers=st.sets(st.integers(0, 50), min_size=1, max_size=12), partitions=st.integers(0, 40),
       seed=st.integers(0, 1000), data=st.data())
def test_replicas_are_distinct_usable_brokers(brokers: set[int], partitions: int, seed: int, data) -> None:
    factor = data.draw(st.integers(1, len(brokers)))
    placed = place_replicas(brokers, partitions, factor, random.Random(seed))
    assert len(placed) == partitions
    for replicas in placed:
        assert len(replicas) == factor == len(set(replicas))
        assert set(replicas) <= brokers
    leaders = Counter(replicas[0] for replicas in placed)
    assert max(leaders.values(), default=0) - min((leaders[b] for b in brokers), default=0) <= 1
