"""KIP-227 fetch sessions: Kafka's id and epoch rules, incremental answers, forgetting, the cache."""

from __future__ import annotations

import random
import uuid

import pytest

from quorum.broker.fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    MAX_EPOCH,
    ContextKind,
    FetchPosition,
    FetchSessionCache,
    PartitionOutcome,
    next_epoch,
)
from quorum.wire.errors import ErrorCode

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def at(offset: int, max_bytes: int = 1000) -> FetchPosition:
    return FetchPosition(offset, max_bytes)


def ok(hw: int, size: int = 0, log_start: int = 0) -> PartitionOutcome:
    return PartitionOutcome(ErrorCode.NONE, hw, hw, log_start, size)


def new_cache(slots: int = 10, eviction_ms: int = 1000) -> FetchSessionCache:
    return FetchSessionCache(slots, eviction_ms, random.Random(7))


def open_session(cache: FetchSessionCache, partitions: dict, now: int = 0, outcomes: dict | None = None,
                 uses_topic_ids: bool = False) -> int:
    context = cache.new_context(INVALID_SESSION_ID, INITIAL_EPOCH, partitions, [], uses_topic_ids, now)
    assert context.kind is ContextKind.FULL
    session_id, named = context.complete(outcomes or {key: ok(5) for key in partitions}, now)
    assert named == list(partitions)
    return session_id


def test_next_epoch_wraps_past_the_largest_int32_to_one():
    assert next_epoch(0) == 1
    assert next_epoch(41) == 42
    assert next_epoch(MAX_EPOCH) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_sessionless_fetch_names_everything_and_creates_nothing():
    cache = new_cache()
    context = cache.new_context(INVALID_SESSION_ID, FINAL_EPOCH, {A0: at(3), B0: at(0)}, [], False, 0)
    assert context.kind is ContextKind.SESSIONLESS
    assert [key for key, _ in context.partitions] == [A0, B0]
    assert context.complete({A0: ok(5), B0: ok(0)}, 0) == (INVALID_SESSION_ID, [A0, B0])
    assert len(cache) == 0


def test_full_fetch_with_epoch_zero_creates_a_session_expecting_epoch_one():
    cache = new_cache()
    session_id = open_session(cache, {A0: at(3), A1: at(4)})
    assert session_id != INVALID_SESSION_ID
    session = cache.get(session_id)
    assert session is not None and session.epoch == 1 and session.size == 2


def test_incremental_fetch_names_only_partitions_that_changed():
    cache = new_cache()
    session_id = open_session(cache, {A0: at(3), A1: at(4), B0: at(0)}, outcomes={A0: ok(5), A1: ok(4), B0: ok(0)})
    context = cache.new_context(session_id, 1, {}, [], False, 10)
    assert context.kind is ContextKind.INCREMENTAL
    # Positions come from the session when the request does not name a partition.
    assert dict(context.partitions) == {A0: at(3), A1: at(4), B0: at(0)}
    outcomes = {A0: ok(5), A1: ok(6), B0: ok(0, log_start=0)}
    assert context.complete(outcomes, 10) == (session_id, [A1])  # A1's high watermark moved
    context = cache.new_context(session_id, 2, {}, [], False, 20)
    assert context.complete({A0: ok(5), A1: ok(6), B0: ok(0)}, 20) == (session_id, [])  # nothing new: nothing named


def test_records_errors_and_log_start_changes_are_named():
    cache = new_cache()
    session_id = open_session(cache, {A0: at(3), A1: at(4), B0: at(0)})
    context = cache.new_context(session_id, 1, {}, [], False, 0)
    outcomes = {
        A0: ok(5, size=100),
        A1: PartitionOutcome(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1, -1, 0),
        B0: ok(5, log_start=2),
    }
    _, named = context.complete(outcomes, 0)
    assert sorted(named) == [A0, A1, B0]


def test_a_partition_answered_with_an_error_is_answered_again_once_the_error_is_gone():
    cache = new_cache()
    session_id = open_session(cache, {A0: at(3)})
    error = PartitionOutcome(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1, -1, 0)
    assert cache.new_context(session_id, 1, {}, [], False, 0).complete({A0: error}, 0)[1] == [A0]
    # Same offsets as before the error, yet named: the client must learn the error is gone.
    assert cache.new_context(session_id, 2, {}, [], False, 0).complete({A0: ok(5)}, 0)[1] == [A0]


def test_partitions_that_returned_records_go_last_next_time():
    cache = new_cache()
    session_id = open_session(cache, {A0: at(0), A1: at(0), B0: at(0)})
    context = cache.new_context(session_id, 1, {}, [], False, 0)
    context.complete({A0: ok(5, size=10), A1: ok(5), B0: ok(5)}, 0)
    context = cache.new_context(session_id, 2, {}, [], False, 0)
    assert [key for key, _ in context.partitions] == [A1, B0, A0]


def test_incremental_request_adds_updates_and_forgets_partitions():
    cache = new_cache()
    session_id = open_session(cache, {A0: at(3), A1: at(4)})
    context = cache.new_context(session_id, 1, {A0: at(9), B0: at(1)}, [A1], False, 0)
    assert dict(context.partitions) == {A0: at(9), B0: at(1)}
    context.complete({A0: ok(9), B0: ok(1)}, 0)
    assert list(cache.get(session_id).partitions) == [A0, B0]


def test_forgetting_every_partition_closes_the_session():
    cache = new_cache()
    session_id = open_session(cache, {A0: at(3)})
    context = cache.new_context(session_id, 1, {}, [A0], False, 0)
    assert context.kind is ContextKind.SESSIONLESS
    assert context.complete({}, 0) == (INVALID_SESSION_ID, [])
    assert cache.get(session_id) is None


def test_wrong_epoch_and_unknown_session_are_refused():
    cache = new_cache()
    session_id = open_session(cache, {A0: at(3)})
    stale = cache.new_context(session_id, 2, {}, [], False, 0)
    assert (stale.kind, stale.error_code) == (ContextKind.ERROR, ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    assert stale.complete({}, 0) == (INVALID_SESSION_ID, [])
    missing = cache.new_context(session_id + 1, 1, {}, [], False, 0)
    assert missing.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    # A refused request does not move the epoch on.
    assert cache.new_context(session_id, 1, {}, [], False, 0).kind is ContextKind.INCREMENTAL


def test_a_session_made_with_topic_ids_refuses_requests_without_them():
    cache = new_cache()
    topic_id = uuid.uuid4()
    session_id = open_session(cache, {(topic_id, 0): at(0)}, uses_topic_ids=True)
    refused = cache.new_context(session_id, 1, {}, [], False, 0)
    assert refused.error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    assert cache.new_context(session_id, 1, {}, [], True, 0).kind is ContextKind.INCREMENTAL


@pytest.mark.parametrize("epoch", [INITIAL_EPOCH, FINAL_EPOCH])
def test_a_full_fetch_naming_a_session_closes_it(epoch):
    cache = new_cache()
    session_id = open_session(cache, {A0: at(3)})
    context = cache.new_context(session_id, epoch, {A0: at(3)}, [], False, 0)
    assert cache.get(session_id) is None
    new_id, _ = context.complete({A0: ok(5)}, 0)
    assert (new_id == INVALID_SESSION_ID) == (epoch == FINAL_EPOCH)


def test_a_full_cache_answers_without_a_session():
    cache = new_cache(slots=1)
    first = open_session(cache, {A0: at(0), A1: at(0)})
    context = cache.new_context(INVALID_SESSION_ID, INITIAL_EPOCH, {B0: at(0)}, [], False, 10)
    assert context.complete({B0: ok(0)}, 10) == (INVALID_SESSION_ID, [B0])
    assert cache.get(first) is not None


def test_a_session_unused_for_the_eviction_time_makes_room():
    cache = new_cache(slots=1, eviction_ms=1000)
    first = open_session(cache, {A0: at(0), A1: at(0)}, now=0)
    second = open_session(cache, {B0: at(0)}, now=1001)
    assert second != INVALID_SESSION_ID and cache.get(first) is None and cache.evictions == 1


def test_an_old_enough_smaller_session_gives_way_to_a_bigger_one():
    cache = new_cache(slots=1, eviction_ms=1000)
    small = open_session(cache, {A0: at(0)}, now=0)
    # Used recently (not stale), but created long enough ago to be evictable when touched.
    cache.new_context(small, 1, {}, [], False, 1500).complete({A0: ok(5)}, 1500)
    same_size = cache.new_context(INVALID_SESSION_ID, INITIAL_EPOCH, {B0: at(0)}, [], False, 1600)
    assert same_size.complete({}, 1600)[0] == INVALID_SESSION_ID  # ties keep the existing session
    bigger = cache.new_context(INVALID_SESSION_ID, INITIAL_EPOCH, {A0: at(0), A1: at(0), B0: at(0)}, [], False, 1700)
    new_id, _ = bigger.complete({}, 1700)
    assert new_id != INVALID_SESSION_ID and cache.get(small) is None


def test_a_young_session_is_not_evicted_for_a_bigger_one():
    cache = new_cache(slots=1, eviction_ms=1000)
    small = open_session(cache, {A0: at(0)}, now=0)
    bigger = cache.new_context(INVALID_SESSION_ID, INITIAL_EPOCH, {A0: at(0), A1: at(0)}, [], False, 500)
    assert bigger.complete({}, 500)[0] == INVALID_SESSION_ID
    assert cache.get(small) is not None


def test_cache_size_comes_from_kafkas_property():
    cache = FetchSessionCache.from_properties({"max.incremental.fetch.session.cache.slots": "3"})
    assert cache.max_slots == 3
    assert FetchSessionCache.from_properties({}).max_slots == 1000
    with pytest.raises(ValueError, match="fetch session cache"):
        FetchSessionCache.from_properties({"max.incremental.fetch.session.cache.slots": "many"})
