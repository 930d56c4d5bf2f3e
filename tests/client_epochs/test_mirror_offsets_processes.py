"""Offset translation end to end (issue 32): a 1-broker source and a 1-broker target, the in-process
Replicator copying a compacted source topic whose log has a gap (the cleaner removed the earlier
records of one key), with offset syncs, checkpoints every 0.5 s and group offset sync on.

A source group commits at several offsets, one of them inside the gap; after each, the checkpoint
arrives on the target, `translate_offsets` gives the target offset, and a consumer starting there
reads a copy of every source record at or after the commit and none before it (the provenance
refinement makes it exact); MM2's conservative translation from the offset syncs the replicator
wrote is checked too: nothing skipped, fewer than offset.lag.max records read again (its window). The group's offsets
on the target (no members there) equal the translation and carry internal metadata naming the
target topic's id; a target commit that is ahead is never moved back; excluded groups get none.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from client_epochs import MetadataClient
from client_epochs.committed import split
from client_epochs.mirror import MirrorOptions, OffsetTranslationOptions, Replicator, translate_offsets
from client_epochs.mirror.checkpoints import read_checkpoints
from client_epochs.mirror.offsets import (
    SyncHistory,
    apply_syncs,
    checkpoints_topic,
    latest_checkpoints,
    offset_syncs_topic,
)
from client_epochs.mirror.progress import read_provenance
from client_epochs.model import TopicPartition as TP
from client_epochs.offset_fetch import OffsetFetcher
from quorum.launcher import LocalCluster
from quorum.wire.mm2_records import OffsetSync
from tests.test_controller_processes import create, wait_until

pytestmark = pytest.mark.timeout(180)

TOPIC = "orders"
QUIET = {"log_level": 0}
SETTINGS = {"auto.create.topics.enable": "false", "group.initial.rebalance.delay.ms": "0"}
CLEANER = {"log.cleaner.backoff.ms": "300", "log.roll.ms": "250", "log.cleaner.min.cleanable.ratio": "0.01"}
LAG_MAX = 4


@pytest.fixture(scope="module")
def clusters(tmp_path_factory) -> Iterator[tuple[str, str]]:
    """(source, target) bootstrap addresses; the source's cleaner runs every 0.3 s on 0.25 s segments."""
    started = []
    try:
        for name, settings in (("source", {**SETTINGS, **CLEANER}), ("target", SETTINGS)):
            cluster = LocalCluster(tmp_path_factory.mktemp(name), controllers=1, brokers=1, settings=settings)
            started.append(cluster)
            cluster.format_storage()
            cluster.start()
        yield started[0].bootstrap_servers, started[1].bootstrap_servers
    finally:
        for cluster in started:
            cluster.stop()


def source_offsets(bootstrap: str) -> list[int]:
    """The offsets of the records the source partition holds, read to its end."""
    return [m.offset() for m in read(bootstrap, 0)]


def read(bootstrap: str, start: int) -> list:
    """The records of TOPIC partition 0 from `start` to the high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False, **QUIET})
    try:
        end = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)[1]
        consumer.assign([TopicPartition(TOPIC, 0, start)])
        got: list = []
        deadline = time.monotonic() + 30
        while start < end and consumer.position([TopicPartition(TOPIC, 0)])[0].offset < end:
            assert time.monotonic() < deadline, f"could not read {TOPIC} of {bootstrap} to {end}"
            got.extend(m for m in consumer.consume(500, 0.5) if m.error() is None)
        return got
    finally:
        consumer.close()


def count(bootstrap: str) -> int:
    """How many records TOPIC partition 0 holds (0 while the topic is not there yet)."""
    try:
        return len(read(bootstrap, 0))
    except KafkaException:
        return 0


def produce_with_a_gap(bootstrap: str) -> None:
    """10 keys once, key "hot" 10 times, then 10 more keys in rolled segments: the cleaner removes the
    first 9 "hot" records, a gap of 9 offsets in the middle of the log."""
    produce(bootstrap, [f"a{i}" for i in range(10)], ["hot"] * 10, *([f"b{i}"] for i in range(10)))


def produce(bootstrap: str, *batches: list[str]) -> None:
    """Each batch's keys (values "value-of-<key>"), acknowledged, 0.3 s apart (past log.roll.ms)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, **QUIET})
    for batch in batches:
        for key in batch:
            producer.produce(TOPIC, f"value-of-{key}".encode(), key.encode(), partition=0)
        assert producer.flush(30) == 0
        time.sleep(0.3)


def commit(bootstrap: str, group: str, offset: int) -> None:
    """A commit of `group` (no members: a plain OffsetCommit as a tool would make it) on partition 0."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, **QUIET})
    try:
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, offset, "app-meta")], asynchronous=False)
    finally:
        consumer.close()


def syncs(bootstrap: str) -> SyncHistory:
    """The offset syncs of TOPIC-0 the source's offset-syncs topic holds, in MM2's format."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False, **QUIET})
    topic = offset_syncs_topic("target")
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
        consumer.assign([TopicPartition(topic, 0, 0)])
        records: list = []

        def to_the_end() -> bool:
            records.extend(m for m in consumer.consume(500, 0.5) if m.error() is None)
            return bool(records) and records[-1].offset() >= end - 1

        wait_until(f"{topic} read to {end}", to_the_end, timeout_s=30)
    finally:
        consumer.close()
    histories: dict = {}
    apply_syncs(histories, (OffsetSync.decode(m.key(), m.value()) for m in records))
    return histories[TP(TOPIC, 0)]


def checkpointed(target: str, group: str, upstream: int) -> bool:
    return any(c.group == group and c.upstream == upstream and c.topic == TOPIC
               for c in read_checkpoints(target, "source", 10, QUIET))


def test_a_group_fails_over_to_the_translated_offsets(clusters):
    source, target = clusters
    admin = AdminClient({"bootstrap.servers": source, **QUIET})
    create(admin, NewTopic(TOPIC, 1, 1, config={"cleanup.policy": "compact", "segment.ms": "250"}))
    produce_with_a_gap(source)
    held = wait_until("the cleaner's gap in the source log",
                      lambda: (offsets := source_offsets(source)) and 10 not in offsets and offsets, timeout_s=60)
    gap = sorted(set(range(held[-1] + 1)) - set(held))
    assert gap, held
    end = held[-1] + 1

    with replicating(source, target) as (replicator, failed):
        wait_until(f"the target holding {len(held)} copies",
                   lambda: failed or count(target) == len(held), timeout_s=60)
        assert not failed, failed
        copies = {read_provenance(m.headers()).source.offset: m.offset() for m in read(target, 0)}
        assert sorted(copies) == held

        commit(target, "ahead", 1000)  # a target group ahead of the source's: never moved back
        commit(source, "ahead", 2)
        commit(source, "console-consumer-7", 3)  # excluded by MM2's default groups.exclude
        for g in (3, gap[len(gap) // 2], gap[-1] + 1, held[-3], end):
            fail_over(source, target, g, held, copies)

        final = translate_offsets(target, "source", "app", config=QUIET)[TP(TOPIC, 0)]
        with MetadataClient(target) as metadata:
            target_id = metadata.fetch([TOPIC]).partitions[TP(TOPIC, 0)].topic_id
        fetcher = OffsetFetcher(target)
        try:
            synced = wait_until("group app's offsets synced to the target", lambda: (
                c := fetcher.fetch("app", [TP(TOPIC, 0)])[TP(TOPIC, 0)]).offset == final and c, timeout_s=30)
            user, internal = split(TP(TOPIC, 0), synced.metadata)
            assert user == "app-meta" and internal is not None and internal.topic_id == target_id
            wait_until("group ahead checkpointed", lambda: checkpointed(target, "ahead", 2), timeout_s=30)
            time.sleep(1.5)  # three group sync rounds
            assert fetcher.fetch("ahead", [TP(TOPIC, 0)])[TP(TOPIC, 0)].offset == 1000
        finally:
            fetcher.close()
        groups = {c.group for c in read_checkpoints(target, "source", 10, QUIET)}
        assert groups == {"app", "ahead"}, groups
        listed = AdminClient({"bootstrap.servers": target, **QUIET}).list_topics(timeout=30).topics
        assert checkpoints_topic("source") in listed
        assert offset_syncs_topic("target") in admin.list_topics(timeout=30).topics
    assert replicator._translation is not None and replicator._translation.syncs_sent > 0

    # a second run (a restart): its first copy is synced again, and it goes on from the checkpoints written
    produce(source, [f"c{i}" for i in range(5)])
    held = source_offsets(source)
    with replicating(source, target) as (replicator, failed):
        wait_until(f"the target holding {len(held)} copies", lambda: failed or count(target) == len(held),
                   timeout_s=60)
        assert not failed, failed
        copies = {read_provenance(m.headers()).source.offset: m.offset() for m in read(target, 0)}
        assert sorted(copies) == held
        assert replicator._translation is not None and replicator._translation.last["app"]  # read at start
        for g in (held[-4], held[-1] + 1):
            fail_over(source, target, g, held, copies)


@contextmanager
def replicating(source: str, target: str) -> Iterator[tuple[Replicator, list[BaseException]]]:
    """An in-process Replicator of TOPIC with offset translation (checkpoints and group sync every 0.5 s),
    running on a thread; stopped and joined on the way out."""
    options = OffsetTranslationOptions(offset_lag_max=LAG_MAX, offset_syncs_interval_s=0.3,
                                       emit_checkpoints_interval_s=0.5, sync_group_offsets_enabled=True,
                                       sync_group_offsets_interval_s=0.5, read_timeout_s=10)
    replicator = Replicator(source, target, [TOPIC], MirrorOptions(
        status_interval_s=1, consumer_config=QUIET, producer_config=QUIET, offsets=options), out=(out := io.StringIO()))
    failed: list[BaseException] = []

    def run() -> None:
        try:
            replicator.run()
        except BaseException as exc:  # reported by the test
            failed.append(exc)

    thread = threading.Thread(target=run, name="replicator", daemon=True)
    thread.start()
    try:
        yield replicator, failed
    finally:
        replicator.stop()
        thread.join(60)
        print(out.getvalue())
    assert not thread.is_alive(), "the replicator did not stop within 60 s"
    assert not failed, failed


def fail_over(source: str, target: str, g: int, held: list[int], copies: dict[int, int]) -> None:
    """Group app commits source offset g; once checkpointed, the target offset translate_offsets gives
    reads every copy from g on and none before (exact), and MM2's conservative rule from the offset
    syncs the replicator wrote skips nothing and reads fewer than offset.lag.max again."""
    commit(source, "app", g)
    end = held[-1] + 1
    exact = copies[min(u for u in held if u >= g)] if g < end else len(held)
    # a commit translating to the same target offset as the one before writes no checkpoint (MM2's rule)
    wait_until(f"a checkpoint of group app at source offset {g}, or one already at target offset {exact}",
               lambda: (latest := latest_checkpoints(read_checkpoints(target, "source", 10, QUIET), "app").get(
                   TP(TOPIC, 0))) is not None and (latest.upstream == g or latest.downstream == exact), timeout_s=30)
    t = translate_offsets(target, "source", "app", config=QUIET)[TP(TOPIC, 0)]
    after = [read_provenance(m.headers()).source.offset for m in read(target, t)]
    missing = {u for u in held if u >= g} - set(after)
    assert not missing, f"from target offset {t} (source {g}) the copies of {sorted(missing)} are skipped"
    assert all(u >= g for u in after), f"source {g} -> target {t} reads {after} (not exact)"
    assert t == exact
    conservative = syncs(source).translate(g)
    assert conservative is not None and conservative <= t
    again = [read_provenance(m.headers()).source.offset for m in read(target, conservative)]
    assert {u for u in held if u >= g} <= set(again)
    assert len([u for u in again if u < g]) < LAG_MAX, f"source {g} -> {conservative} reads {again}"
    print(f"source {g} -> target {t} (MM2's rule: {conservative})")


def test_translate_offsets_without_checkpoints_is_empty(clusters):
    _, target = clusters
    assert translate_offsets(target, "elsewhere", "app", timeout_s=10, config=QUIET) == {}
