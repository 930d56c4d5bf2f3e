"""KIP-232's rule, as properties: the cache never takes an older view of a partition it cares about,
-1 checks nothing, uninterested partitions never cause a refusal, and without topic epochs
(Apache Kafka) a topic id change is newer and a retired topic id is older."""

from __future__ import annotations

import logging
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client_epochs import (
    EVERYTHING,
    EpochCache,
    Epochs,
    Interest,
    PartitionMetadata,
    TopicPartition,
    is_outdated,
    judge,
)
from quorum.wire.internal_metadata import InternalMetadata

IDS = [uuid.UUID(int=n) for n in (11, 22, 33)]
TOPICS = ["a", "b", "c"]

known_epoch = st.integers(0, 6)
any_epoch = st.one_of(st.just(-1), known_epoch)
topic_ids = st.one_of(st.none(), st.sampled_from(IDS))
partitions = st.builds(TopicPartition, st.sampled_from(TOPICS), st.integers(0, 2))


def epochs(topic_epoch=any_epoch, leader_epoch=any_epoch, topic_id=topic_ids):
    return st.builds(Epochs, topic_epoch, leader_epoch, topic_id)


def views(values=None):
    return st.dictionaries(partitions, values if values is not None else epochs(), max_size=9)


interests = st.one_of(
    st.just(EVERYTHING),
    st.builds(Interest, st.frozensets(st.sampled_from(TOPICS)), st.frozensets(partitions)),
)
full = epochs(known_epoch, known_epoch)  # both epochs known: KIP-232 against this project's cluster
fallback = epochs(st.just(-1), known_epoch)  # no topic epoch: Apache Kafka


def kip_older(offered: Epochs, known: Epochs) -> bool:
    """The KIP's formula, with both epochs known."""
    return (offered.topic_epoch, offered.leader_epoch) < (known.topic_epoch, known.leader_epoch)


# --- is_outdated: one partition -------------------------------------------------------------------------


@given(full, full)
def test_with_both_epochs_known_the_order_is_lexicographic(offered, known):
    assert is_outdated(offered, known) == kip_older(offered, known)


@given(full, full, st.frozensets(st.sampled_from(IDS)))
def test_a_known_topic_epoch_decides_whatever_the_topic_ids(offered, known, retired):
    """Topic ids are only the fallback: with topic epochs the KIP's order is the whole story."""
    assert is_outdated(offered, known, retired) == kip_older(offered, known)


@given(any_epoch, any_epoch, known_epoch, known_epoch, topic_ids)
def test_an_unknown_topic_epoch_leaves_the_leader_epochs_to_decide(te_offered, te_known, le_offered, le_known, tid):
    if te_offered >= 0 and te_known >= 0:
        te_known = -1
    offered, known = Epochs(te_offered, le_offered, tid), Epochs(te_known, le_known, tid)
    assert is_outdated(offered, known) == (le_offered < le_known)


@given(epochs(leader_epoch=st.just(-1)), epochs())
def test_an_unknown_leader_epoch_is_never_older_within_a_topic_epoch(offered, known):
    known = Epochs(offered.topic_epoch, known.leader_epoch, known.topic_id)
    assert not is_outdated(offered, known)
    assert not is_outdated(known, offered)


@given(st.integers(-1, 6), st.integers(-1, 6))
def test_nothing_known_means_no_check_at_all(le_offered, le_known):
    """Old clients, old brokers, offsets committed without internal metadata: today's behaviour."""
    unknown = Epochs(-1, -1)
    assert not is_outdated(unknown, Epochs(-1, le_known))
    assert not is_outdated(Epochs(-1, le_offered), unknown)


@given(fallback, fallback)
def test_without_topic_epochs_a_new_topic_id_is_newer(offered, known):
    offered, known = Epochs(-1, offered.leader_epoch, IDS[1]), Epochs(-1, known.leader_epoch, IDS[0])
    assert not is_outdated(offered, known)
    assert is_outdated(Epochs(-1, offered.leader_epoch, IDS[0]), offered, retired_ids={IDS[0]})


@given(epochs(), epochs())
def test_two_views_are_never_older_than_each_other(a, b):
    """Whatever is known and unknown, the rule cannot refuse both directions (a refresh would never end)."""
    assert not (is_outdated(a, b) and is_outdated(b, a))


# --- judge / EpochCache: whole responses ---------------------------------------------------------------


@settings(max_examples=100)
@given(views(), views(), interests)
def test_only_interested_partitions_both_sides_know_can_be_outdated(cached, offered, interest):
    verdict = judge(offered, cached, interest)
    assert {s.partition for s in verdict.outdated} == {
        tp for tp in cached if tp in offered and tp in interest and is_outdated(offered[tp], cached[tp])
    }
    assert all(tp in interest and tp in cached and tp not in offered for tp in verdict.missing)


@settings(max_examples=100)
@given(views(), views(), interests)
def test_uninterested_partitions_never_cause_a_refusal(cached, offered, interest):
    cache = EpochCache(interest=interest)
    cache.offer(cached)
    cared = {tp: value for tp, value in offered.items() if tp in interest}
    fresh = {tp: cache.view()[tp] for tp in cared if tp in cache.view()}  # what the cache has: never outdated
    response = {**offered, **fresh}
    assert cache.offer(response).accepted


@settings(max_examples=100)
@given(st.lists(views(full), min_size=1, max_size=8), interests)
def test_the_cache_never_moves_backwards_for_any_partition(responses, interest):
    """With both epochs known: interested partitions refuse older views, the others are not taken."""
    cache = EpochCache(interest=interest)
    for response in responses:
        before = cache.view()
        verdict = cache.offer(response)
        after = cache.view()
        if not verdict.accepted:
            assert after == before, "a refused response must leave the cache as it was"
            assert any(tp in interest and kip_older(response[tp], before[tp]) for tp in response if tp in before)
        for tp, old in before.items():
            assert not kip_older(after[tp], old), f"{tp} went back from {old} to {after[tp]}"
        assert set(after) == set(before) | (set(response) if verdict.accepted else set())


@settings(max_examples=100)
@given(st.lists(views(), min_size=1, max_size=8), interests)
def test_an_accepted_response_is_never_older_where_the_client_looks(responses, interest):
    cache = EpochCache(interest=interest)
    for response in responses:
        before = cache.view()
        retired = {topic: cache.retired_topic_ids(topic) for topic in TOPICS}
        if cache.offer(response).accepted:
            for tp in response:
                if tp in interest and tp in before:
                    assert not is_outdated(response[tp], before[tp], retired[tp.topic])
                    assert cache.get(tp) == response[tp]


def test_a_refusal_names_the_partition_and_both_views():
    cache = EpochCache()
    tp = TopicPartition("orders", 0)
    cache.offer({tp: Epochs(3, 5)})
    verdict = cache.offer({tp: Epochs(3, 4)}, source="127.0.0.1:9093")
    assert not verdict.accepted
    assert (
        verdict.describe() == "orders-0: offered (topic_epoch 3, leader_epoch 4) is older than (topic_epoch 3, "
        "leader_epoch 5)"
    )
    assert cache.offer({tp: Epochs(4, 0)}).accepted, "a recreated topic (higher topic epoch) starts leader epochs again"
    assert cache.get(tp) == Epochs(4, 0)


# --- the Apache Kafka fallback -----------------------------------------------------------------------------


@given(fallback, st.integers(0, 6), st.integers(0, 6))
def test_a_recreated_topic_is_accepted_and_its_old_id_is_refused_afterwards(old, new_leader_epoch, stale_epoch):
    tp = TopicPartition("a", 0)
    cache = EpochCache()
    cache.offer({tp: Epochs(-1, old.leader_epoch, IDS[0])})
    assert cache.offer({tp: Epochs(-1, new_leader_epoch, IDS[1])}).accepted
    assert cache.retired_topic_ids("a") == {IDS[0]}
    stale = cache.offer({tp: Epochs(-1, stale_epoch, IDS[0])})
    assert not stale.accepted, "a broker that missed the recreation answers with the retired id"
    assert cache.get(tp) == Epochs(-1, new_leader_epoch, IDS[1])


def test_apache_kafka_fallback_is_logged_once_per_cache(caplog):
    tp = TopicPartition("a", 0)
    caches = [EpochCache(), EpochCache()]
    with caplog.at_level(logging.WARNING, logger="client_epochs.epoch_cache"):
        for epoch in range(5):
            for cache in caches:
                cache.offer({tp: PartitionMetadata(1, epoch, IDS[0], -1)}, source="kafka:9092")
                cache.check_floors({tp: PartitionMetadata(1, epoch, IDS[0], -1)}, {tp: Epochs(-1, 0)})
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "kafka:9092" in warnings[0].getMessage() and "no KIP-232 topic epoch" in warnings[0].getMessage()


def test_no_fallback_warning_with_topic_epochs_or_for_uninterested_partitions(caplog):
    cache = EpochCache(interest=Interest.of(["a"]))
    with caplog.at_level(logging.WARNING, logger="client_epochs.epoch_cache"):
        cache.offer({TopicPartition("a", 0): Epochs(2, 1), TopicPartition("b", 0): Epochs(-1, 1)})
    assert not caplog.records


# --- floors: the seek / committed variant ------------------------------------------------------------------


@settings(max_examples=100)
@given(views(), views())
def test_floors_are_judged_like_a_cache_that_holds_them(offered, floors):
    cache = EpochCache()
    floor_verdict = cache.check_floors(offered, floors)
    holder = EpochCache()
    holder.offer(floors)
    assert floor_verdict == holder.check(offered)
    assert cache.view() == {}, "checking floors does not fill the cache"


@given(views(full), full)
def test_a_missing_partition_with_a_floor_is_not_current(offered, floor):
    tp = TopicPartition("z", 0)  # never generated: the broker does not know it
    verdict = EpochCache().check_floors(offered, {tp: floor})
    assert verdict.accepted and not verdict.current and verdict.missing == (tp,)
    assert EpochCache().check_floors(offered, {tp: Epochs(-1, -1)}).current, "an unknown floor asks for nothing"


@given(full, full)
def test_internal_metadata_is_a_floor(offered, committed):
    tp = TopicPartition("a", 1)
    floor = InternalMetadata(committed.topic_epoch, committed.leader_epoch)
    verdict = EpochCache().check_floors({tp: offered}, {tp: floor})
    assert verdict.accepted == (not kip_older(offered, committed))


def test_floors_refuse_a_topic_id_the_cache_saw_retired():
    tp = TopicPartition("a", 0)
    cache = EpochCache()
    cache.offer({tp: Epochs(-1, 3, IDS[0])})
    cache.offer({tp: Epochs(-1, 0, IDS[1])})
    assert not cache.check_floors({tp: Epochs(-1, 9, IDS[0])}, {tp: Epochs(-1, 0)}).accepted


# --- interest --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("items", "inside", "outside"),
    [
        (["a"], [("a", 0), ("a", 7)], [("b", 0)]),
        ([("b", 1)], [("b", 1)], [("b", 0), ("a", 1)]),
        (["a", TopicPartition("b", 2)], [("a", 3), ("b", 2)], [("b", 3), ("c", 0)]),
        ([], [], [("a", 0)]),
    ],
)
def test_interest_in_topics_and_partitions(items, inside, outside):
    interest = Interest.of(items)
    assert all(TopicPartition(*tp) in interest for tp in inside)
    assert not any(TopicPartition(*tp) in interest for tp in outside)
    assert TopicPartition("anything", 0) in EVERYTHING


def test_forget_drops_a_topic_but_remembers_its_retired_ids():
    cache = EpochCache()
    cache.offer({TopicPartition("a", 0): Epochs(-1, 1, IDS[0]), TopicPartition("b", 0): Epochs(1, 1)})
    cache.offer({TopicPartition("a", 0): Epochs(-1, 0, IDS[1])})
    cache.forget(["a"])
    assert set(cache.view()) == {TopicPartition("b", 0)}
    assert cache.retired_topic_ids("a") == {IDS[0]}
