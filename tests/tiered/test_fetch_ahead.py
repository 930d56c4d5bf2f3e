"""Fetch-ahead planning (tiered_follower.fetch_ahead, sans-IO): which chunks a read needs and which
to fetch ahead of it, within one segment and on into the next; how deep, by whether the reader
goes on where it left off."""

from __future__ import annotations

import pytest

from tiered_follower.fetch_ahead import (
    ReadStart,
    SequentialReads,
    chunk_bounds,
    chunks_covering,
    plan_next_segment,
    plan_read,
    runs,
    worth_starting,
)

MB = 1 << 20


def nothing(_index: int) -> bool:
    return False


def test_chunks_cover_exactly_the_bytes_asked():
    assert list(chunks_covering(0, 1, 4)) == [0]
    assert list(chunks_covering(3, 5, 4)) == [0, 1]
    assert list(chunks_covering(4, 8, 4)) == [1]
    assert list(chunks_covering(5, 5, 4)) == []
    assert chunk_bounds(2, 4, 10) == (8, 10)  # the last chunk is short
    with pytest.raises(ValueError, match="outside an object of 10 bytes"):
        chunk_bounds(3, 4, 10)
    with pytest.raises(ValueError, match="chunk size must be positive"):
        chunks_covering(0, 1, 0)


def test_a_read_needs_its_missing_chunks_and_fetches_the_next_ones_ahead():
    plan = plan_read(size=40 * MB, chunk_size=4 * MB, start=5 * MB, end=6 * MB, prefetch_bytes=16 * MB,
                     present=nothing)  # fmt: skip
    assert plan.needed == (1,)
    assert plan.ahead == (2, 3, 4, 5)
    assert plan.ahead_left == 0


def test_chunks_cached_or_in_flight_are_neither_needed_nor_fetched_again():
    cached = {1, 3}
    plan = plan_read(40 * MB, 4 * MB, 5 * MB, 9 * MB, 12 * MB, cached.__contains__)
    assert plan.needed == (2,)  # 1 is cached
    assert plan.ahead == (4, 5)  # 3 is on its way; the budget still counts it


def test_near_the_end_of_a_segment_the_rest_of_the_budget_goes_to_the_next():
    plan = plan_read(10 * MB, 4 * MB, 7 * MB, 8 * MB, 16 * MB, nothing)
    assert plan.needed == (1,)
    assert plan.ahead == (2,)  # bytes 8..10 MiB: 2 MiB of the 16
    assert plan.ahead_left == 14 * MB
    assert plan_next_segment(40 * MB, 4 * MB, plan.ahead_left, nothing) == (0, 1, 2, 3)
    assert plan_next_segment(40 * MB, 4 * MB, 0, nothing) == ()


def test_no_prefetch_plans_only_what_the_read_needs():
    plan = plan_read(40 * MB, 4 * MB, 0, 1, 0, nothing)
    assert (plan.needed, plan.ahead, plan.ahead_left) == ((0,), (), 0)


def test_fetch_ahead_from_inside_a_cached_chunk_counts_only_what_lies_past_the_read():
    """A read ending 1 MiB into chunk 1 (cached): 3 MiB of the budget go to the rest of chunk 1,
    the other 13 MiB to chunks 2 to 5; counting the whole of chunk 1 would fetch one chunk less."""
    plan = plan_read(40 * MB, 4 * MB, 5 * MB, 5 * MB, 16 * MB, {1}.__contains__)
    assert plan.needed == ()
    assert plan.ahead == (2, 3, 4, 5)


def test_the_fetch_ahead_waits_for_half_its_window_unless_the_next_chunk_is_missing():
    # a 64 MiB window sliding by a read of 1 MiB: one 8 MiB chunk missing is not worth a GET yet
    assert not worth_starting(missing=8 * MB, depth=64 * MB, next_missing=False)
    assert worth_starting(missing=32 * MB, depth=64 * MB, next_missing=False)  # half consumed: a run of four
    assert worth_starting(missing=8 * MB, depth=64 * MB, next_missing=True)  # the reader would wait for it
    assert worth_starting(missing=8 * MB, depth=16 * MB, next_missing=False)  # a shallow window: each chunk
    assert not worth_starting(missing=0, depth=64 * MB, next_missing=True)
    # the window runs past the last segment: what is missing there will not grow, so it goes now
    assert worth_starting(missing=8 * MB, depth=64 * MB, next_missing=False, at_end=True)


def test_chunks_go_out_as_runs_of_consecutive_chunks():
    assert runs((2, 3, 4, 7, 9, 10)) == [range(2, 5), range(7, 8), range(9, 11)]
    assert runs(()) == []


def test_a_sequential_reader_gets_a_deeper_fetch_ahead_each_read_and_any_other_read_starts_shallow():
    reads = SequentialReads(base=16 * MB, maximum=64 * MB)
    assert reads.start("p", "s1", 0) == ReadStart(None, 16 * MB)  # nothing known: where it starts needs the index
    reads.ended("p", "s1", next_offset=100, position=1 * MB, depth=16 * MB)
    assert reads.start("p", "s1", 100) == ReadStart(1 * MB, 32 * MB)  # goes on: no index, twice as deep
    reads.ended("p", "s1", 200, 2 * MB, 32 * MB)
    reads.ended("p", "s1", 300, 3 * MB, 64 * MB)
    assert reads.start("p", "s1", 300) == ReadStart(3 * MB, 64 * MB)  # never past the maximum
    assert reads.start("p", "s1", 250) == ReadStart(None, 16 * MB)  # a seek: shallow again
    assert reads.start("p", "s2", 300) == ReadStart(None, 64 * MB)  # the next segment: sequential, its byte 0 is
    assert reads.start("q", "s1", 300) == ReadStart(None, 16 * MB)  # the caller's (offset <= its first offset)
    reads.ended("p", "s1", 400, 4 * MB, 64 * MB, start=(300, 3 * MB))
    assert reads.start("p", "s1", 300) == ReadStart(3 * MB, 64 * MB)  # asked again (its answer was lost): as deep


def test_sequential_reads_remember_a_bounded_number_of_streams():
    reads = SequentialReads(base=1, maximum=8, streams=2)
    for stream in ("a", "b", "c"):
        reads.ended(stream, "s", 10, 100, 4)
    assert reads.start("a", "s", 10) == ReadStart(None, 1)  # the least recently read, forgotten
    assert reads.start("c", "s", 10) == ReadStart(100, 8)
    assert SequentialReads(base=32, maximum=8).base == 8  # the base never above the maximum
    with pytest.raises(ValueError, match="streams must be positive"):
        SequentialReads(1, 8, streams=0)
