"""ReplicaManager following metadata images: open, lead, follow, reconfigure, delete; and Produce on top."""

from __future__ import annotations

import asyncio
import random
import threading
import uuid

import pytest

from quorum.broker import log_deletion, replica_manager
from quorum.broker.log_config import BROKER_RESOURCE, TOPIC_RESOURCE
from quorum.broker.produce import ProduceHandlers, register_produce
from quorum.broker.replica_manager import ReplicaManager
from quorum.controller import ControllerConfig, QuorumController
from quorum.image.delta import MetadataDelta
from quorum.image.image import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo
from quorum.net.dispatch import Dispatcher
from quorum.wire.errors import ErrorCode
from quorum.wire.framing import RequestHeader
from quorum.wire.protocol import APIS, Request, decode_body
from tests.broker.test_partition import T0, client_batch
from tests.controller.fakes import alter_configs_request, legacy_alter_configs_request

ORDERS = uuid.UUID(int=1)
AUDIT = uuid.UUID(int=2)


def topic(name: str, topic_id: uuid.UUID, assignments: list[tuple[int, list[int]]], epoch: int = 0,
          isr: list[int] | None = None) -> TopicInfo:
    partitions = tuple(PartitionInfo(p, leader, epoch, tuple(replicas), tuple(isr or [leader]))
                       for p, (leader, replicas) in enumerate(assignments))  # fmt: skip
    return TopicInfo(name, topic_id, partitions)


def image(*topics: TopicInfo, configs=None) -> MetadataImage:
    brokers = {n: BrokerInfo(n, "127.0.0.1", 9000 + n) for n in (1, 2, 3)}
    return MetadataImage(cluster_id="c", controller_id=1, brokers=brokers, topics={t.name: t for t in topics},
                         configs=configs or {})


def test_partitions_follow_the_image(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = ReplicaManager(1, dirs, {"log.segment.bytes": "100000"})
    manager.apply_image(image(topic("orders", ORDERS, [(1, [1, 2]), (2, [2, 1]), (3, [3, 2])])))
    assert sorted(p.name for p in manager.partitions()) == ["orders-0", "orders-1"]
    leader, follower = manager.get("orders", 0), manager.get_by_id(ORDERS, 1)
    assert leader.is_leader and not follower.is_leader and manager.get("orders", 2) is None
    assert {leader.directory.parent, follower.directory.parent} == set(dirs), "spread over the log dirs"
    assert leader.config.segment_bytes == 100000
    leader.append_as_leader(client_batch(), T0)
    # Leadership moves with a new epoch; a topic config arrives.
    manager.apply_image(image(topic("orders", ORDERS, [(2, [1, 2]), (1, [2, 1])], epoch=4),
                              configs={(TOPIC_RESOURCE, "orders"): {"segment.bytes": "5000"},
                                       (BROKER_RESOURCE, ""): {"log.retention.ms": "60000"}}))
    assert not leader.is_leader and leader.leader_epoch == 4 and follower.is_leader
    assert leader.config.segment_bytes == 5000 and leader.log.segment_bytes == 5000
    assert leader.config.retention_ms == 60000
    # The topic is re-created under a new id: the old log goes, a new empty one comes.
    old_dir = leader.directory
    manager.apply_image(image(topic("orders", uuid.UUID(int=9), [(1, [1])])))
    fresh = manager.get("orders", 0)
    assert fresh is not leader and fresh.log_end_offset == 0 and manager.get("orders", 1) is None
    assert not (old_dir.parent / "orders-1").exists()
    # Deleted.
    manager.apply_image(image())
    assert manager.partitions() == [] and not list(dirs[0].glob("orders-*")) + list(dirs[1].glob("orders-*"))
    manager.close()


def test_a_hosted_log_that_starts_refusing_writes_is_reported_with_its_partition(tmp_path, monkeypatch):
    manager = ReplicaManager(1, [tmp_path])
    told: list[tuple[str, int]] = []
    manager.on_log_failure = lambda partition, exc: told.append((partition.name, exc.errno))
    manager.apply_image(image(topic("orders", ORDERS, [(2, [2, 1]), (1, [1])])))
    follower = manager.get("orders", 0)
    follower.log.append(client_batch(3))

    def full(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("quorum.log.log.write_checkpoint", full)
    with pytest.raises(OSError):
        follower.log.truncate_to(0)
    assert told == [("orders-0", 28)]
    manager.close()


def test_restart_reopens_logs_and_deletes_strays(tmp_path):
    manager = ReplicaManager(1, [tmp_path])
    manager.apply_image(image(topic("orders", ORDERS, [(1, [1])]), topic("audit", AUDIT, [(1, [1])])))
    manager.get("orders", 0).append_as_leader(client_batch(5), T0)
    manager.close()
    (tmp_path / "__cluster_metadata-0").mkdir()
    (tmp_path / "not-ours-0").mkdir()
    (tmp_path / "orders-7.0123-delete").mkdir()  # an interrupted deletion
    manager = ReplicaManager(1, [tmp_path])
    assert not (tmp_path / "orders-7.0123-delete").exists()
    manager.apply_image(image(topic("orders", ORDERS, [(1, [1])])))  # audit was deleted while we were down
    assert manager.get("orders", 0).log_end_offset == 5
    assert manager.get("orders", 0).high_watermark == 5
    assert not (tmp_path / "audit-0").exists()
    assert (tmp_path / "__cluster_metadata-0").exists() and (tmp_path / "not-ours-0").exists()
    manager.close()


def test_an_image_is_applied_to_the_topics_it_changed_only(tmp_path):
    """Issue 17: after the first image, only topics whose TopicInfo (or topic config) is not the
    previous image's are looked at; a broker-level config change looks at everything again."""
    manager = ReplicaManager(1, [tmp_path])
    orders, audit = topic("orders", ORDERS, [(1, [1]), (2, [1, 2])]), topic("audit", AUDIT, [(1, [1])])
    first = manager.apply_image(image(orders, audit))
    assert first.everything and {p.name for p in first.updated} == {"orders-0", "orders-1", "audit-0"}
    moved = manager.apply_image(image(orders, topic("audit", AUDIT, [(2, [1, 2])], epoch=3)))
    assert not moved.everything and [p.name for p in moved.updated] == ["audit-0"] and moved.removed == ()
    assert manager.get("audit", 0).leader_epoch == 3 and not manager.get("audit", 0).is_leader
    deleted = manager.apply_image(image(topic("audit", AUDIT, [(2, [1, 2])], epoch=3)))
    assert sorted(p.name for p in deleted.removed) == ["orders-0", "orders-1"] and manager.get("orders", 0) is None
    audit = manager.image.topics["audit"]
    configured = manager.apply_image(image(audit, configs={(TOPIC_RESOURCE, "audit"): {"segment.bytes": "5000"}}))
    assert [p.name for p in configured.updated] == ["audit-0"] and manager.get("audit", 0).config.segment_bytes == 5000
    default = manager.apply_image(image(audit, configs={(TOPIC_RESOURCE, "audit"): {"segment.bytes": "5000"},
                                                        (BROKER_RESOURCE, ""): {"log.retention.ms": "60000"}}))
    assert default.everything and manager.get("audit", 0).config.retention_ms == 60000
    manager.close()


def test_new_logs_open_off_the_event_loop_with_the_same_outcome(tmp_path, monkeypatch):
    """`apply_image_off_loop` opens new logs in a worker thread and leaves what `apply_image` leaves."""
    opened_in: list[tuple[str, bool]] = []
    open_log = replica_manager._open_log

    def recording(item):
        opened_in.append((f"{item.topic.name}-{item.info.partition}", threading.current_thread() is main))
        return open_log(item)

    main = threading.current_thread()
    monkeypatch.setattr(replica_manager, "_open_log", recording)
    first = image(topic("orders", ORDERS, [(1, [1]), (2, [2, 1]), (3, [3])]))
    second = image(topic("orders", ORDERS, [(2, [1, 2]), (1, [2, 1])], epoch=2))

    async def scenario(manager: ReplicaManager) -> None:
        await manager.apply_image_off_loop(first)
        await manager.apply_image_off_loop(second)

    off_loop = ReplicaManager(1, [tmp_path / "a", tmp_path / "b"])
    asyncio.run(scenario(off_loop))
    assert opened_in == [("orders-0", False), ("orders-1", False)]
    inline = ReplicaManager(1, [tmp_path / "c", tmp_path / "d"])
    inline.apply_image(first)
    inline.apply_image(second)
    assert opened_in[2:] == [("orders-0", True), ("orders-1", True)]

    def state(manager: ReplicaManager) -> list:
        return sorted((p.name, p.is_leader, p.leader_epoch, p.directory.parent.name in "ac")
                      for p in manager.partitions())  # fmt: skip

    assert state(off_loop) == state(inline) == [("orders-0", False, 2, True), ("orders-1", True, 2, False)]
    off_loop.close()
    inline.close()



def test_removed_logs_are_deleted_off_the_event_loop_before_a_new_topic_of_the_same_name_opens(tmp_path, monkeypatch):
    """A topic of thousands of partitions deleted on the event loop stopped a broker for seconds: the logs
    are closed and renamed in the worker thread, before any log of the same image opens (a topic re-created
    under its old name opens the same directory), and the renamed directories removed on the deleter's
    thread; what it had not removed at `close` is removed at the next start."""
    on_loop: list[tuple[str, bool]] = []
    rename, remove = replica_manager.rename_for_deletion, log_deletion.remove_renamed

    def renaming(directories):
        directories = list(directories)
        on_loop.extend((f"rename {d.name}", threading.current_thread() is main) for d in directories)
        return rename(directories)

    def removing(doomed):
        on_loop.append((f"remove {doomed.name.partition('.')[0]}", threading.current_thread() is main))
        remove(doomed)

    main = threading.current_thread()
    monkeypatch.setattr(replica_manager, "rename_for_deletion", renaming)
    monkeypatch.setattr(log_deletion, "remove_renamed", removing)
    manager = ReplicaManager(1, [tmp_path])

    async def scenario() -> None:
        await manager.apply_image_off_loop(image(topic("orders", ORDERS, [(1, [1]), (1, [1])])))
        manager.get("orders", 0).append_as_leader(client_batch(5), T0)
        await manager.apply_image_off_loop(image(topic("orders", uuid.UUID(int=9), [(1, [1])])))
        fresh = manager.get("orders", 0)
        assert fresh.topic_id == uuid.UUID(int=9) and fresh.log_end_offset == 0, "a new log, not the old one"
        assert fresh.directory == tmp_path / "orders-0" and (tmp_path / "orders-0").is_dir()
        await manager.apply_image_off_loop(image())
        assert manager.partitions() == [] and not (tmp_path / "orders-0").exists(), "renamed before it returns"

    asyncio.run(scenario())
    manager.close()
    renamed = [name for name, _ in on_loop if name.startswith("rename")]
    assert renamed[:2] in (["rename orders-0", "rename orders-1"], ["rename orders-1", "rename orders-0"])
    assert renamed[2:] == ["rename orders-0"], "the re-created topic's log, at its deletion"
    assert {name for name, _ in on_loop if name.startswith("remove")} <= {"remove orders-0", "remove orders-1"}
    assert not any(loop for _, loop in on_loop), on_loop
    ReplicaManager(1, [tmp_path]).close()
    assert not list(tmp_path.glob("orders-*")), "removed by the deleter, or else at the next start"


# -- the Produce handler ------------------------------------------------------------------------


def produce_request(version: int, acks: int, partitions: list[tuple[str, int, bytes | None]],
                    topic_ids: dict[str, uuid.UUID] | None = None, timeout_ms: int = 1000) -> Request:
    api = APIS[0]
    data = api.request.TopicProduceData
    topics: dict[str, list] = {}
    for name, index, records in partitions:
        topics.setdefault(name, []).append(data.PartitionProduceData(index=index, records=records))
    entries = [data(topic_id=(topic_ids or {})[name], partition_data=parts) if version >= 13
               else data(name=name, partition_data=parts) for name, parts in topics.items()]  # fmt: skip
    body = api.request(transactional_id=None, acks=acks, timeout_ms=timeout_ms, topic_data=entries)
    decoded = decode_body(api.request, body.encode(version=version), 0, version)
    return Request(RequestHeader(0, version, 1, "test"), api, decoded)


def run(coroutine):
    return asyncio.run(coroutine)


def test_produce_answers_each_partition_on_its_own(tmp_path):
    manager = ReplicaManager(1, [tmp_path], {"message.max.bytes": "1000"})
    manager.apply_image(image(topic("orders", ORDERS, [(1, [1]), (2, [2, 1])])))
    handlers = ProduceHandlers(manager, lambda: T0)
    for version in (3, 8, 9, 12):
        request = produce_request(version, -1, [
            ("orders", 0, client_batch()), ("orders", 1, client_batch()), ("orders", 5, client_batch()),
            ("missing", 0, client_batch()), ("orders", 0, client_batch(value=b"x" * 2000)),
            ("orders", 0, client_batch()[:-1]),
        ])  # fmt: skip
        reply = run(handlers.produce(request))
        body = reply.body
        encoded = body.encode(version=version)  # encodes at every version
        assert encoded
        codes = [(t.name, p.index, p.error_code) for t in body.responses for p in t.partition_responses]
        assert codes == [("orders", 0, 0), ("orders", 1, ErrorCode.NOT_LEADER_OR_FOLLOWER),
                         ("orders", 5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                         ("orders", 0, ErrorCode.MESSAGE_TOO_LARGE),
                         ("orders", 0, ErrorCode.CORRUPT_MESSAGE),
                         ("missing", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]  # fmt: skip
    assert manager.get("orders", 0).log_end_offset == 12
    # v10+: a NOT_LEADER_OR_FOLLOWER answer points at the leader.
    reply = run(handlers.produce(produce_request(12, 1, [("orders", 1, client_batch())])))
    (partition,) = reply.body.responses[0].partition_responses
    assert partition.current_leader.leader_id == 2
    assert [(n.node_id, n.port) for n in reply.body.node_endpoints] == [(2, 9002)]
    # v13 names topics by id.
    reply = run(handlers.produce(produce_request(13, 1, [("orders", 0, client_batch()), ("gone", 0, client_batch())],
                                                 {"orders": ORDERS, "gone": uuid.UUID(int=77)})))
    assert [(t.topic_id, t.partition_responses[0].error_code, t.partition_responses[0].base_offset)
            for t in reply.body.responses] == [(ORDERS, 0, 12), (uuid.UUID(int=77), ErrorCode.UNKNOWN_TOPIC_ID, -1)]
    # acks=0: no response; bad acks: INVALID_REQUIRED_ACKS.
    assert run(handlers.produce(produce_request(9, 0, [("orders", 0, client_batch())]))) is None
    reply = run(handlers.produce(produce_request(9, 2, [("orders", 0, client_batch())])))
    assert reply.body.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_REQUIRED_ACKS
    manager.close()


def test_acks_all_waits_for_the_high_watermark_of_a_larger_isr(tmp_path):
    manager = ReplicaManager(1, [tmp_path])
    manager.apply_image(image(topic("orders", ORDERS, [(1, [1, 2])], isr=[1, 2])))
    handlers = ProduceHandlers(manager, lambda: T0)
    partition = manager.get("orders", 0)

    async def scenario() -> tuple:
        timed_out = await handlers.produce(produce_request(9, -1, [("orders", 0, client_batch())], timeout_ms=50))
        acked_by_one = await handlers.produce(produce_request(9, 1, [("orders", 0, client_batch())]))
        waiting = asyncio.create_task(handlers.produce(produce_request(9, -1, [("orders", 0, client_batch())])))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        partition.advance_high_watermark(9)  # what the replication code will do
        manager.notifier.appended()
        return timed_out, acked_by_one, await waiting

    timed_out, acked_by_one, acked = run(scenario())
    assert timed_out.body.responses[0].partition_responses[0].error_code == ErrorCode.REQUEST_TIMED_OUT
    assert acked_by_one.body.responses[0].partition_responses[0].error_code == 0
    assert acked.body.responses[0].partition_responses[0].base_offset == 6
    assert acked.body.responses[0].partition_responses[0].error_code == 0
    manager.close()


def test_init_producer_id(tmp_path):
    manager = ReplicaManager(3, [tmp_path])
    dispatcher = Dispatcher()
    handlers = register_produce(dispatcher, manager)
    assert {0, 22} <= set(dispatcher.served)
    api = APIS[22]
    ids = []
    for version in (0, 2, 4):
        body = api.request(transactional_id=None, transaction_timeout_ms=60000)
        decoded = decode_body(api.request, body.encode(version=version), 0, version)
        request = Request(RequestHeader(22, version, 1, "t"), api, decoded)
        reply = run(handlers.init_producer_id(request))
        assert reply.body.error_code == 0 and reply.body.producer_epoch == 0
        ids.append(reply.body.producer_id)
    assert len(set(ids)) == 3 and all(pid >= 0 for pid in ids)
    body = api.request(transactional_id="tx", transaction_timeout_ms=60000)
    request = Request(RequestHeader(22, 4, 1, "t"), api, decode_body(api.request, body.encode(version=4), 0, 4))
    assert run(handlers.init_producer_id(request)).body.error_code == ErrorCode.INVALID_REQUEST
    manager.close()


def test_the_log_cleaner_compacts_compacted_partitions_only_and_a_closed_one_quietly(tmp_path, caplog):
    manager = ReplicaManager(1, [tmp_path], {"log.segment.bytes": "300"})
    configs = {(TOPIC_RESOURCE, "orders"): {"cleanup.policy": "compact", "segment.bytes": "300"}}
    manager.apply_image(image(topic("orders", ORDERS, [(1, [1])]), topic("audit", AUDIT, [(1, [1])]), configs=configs))
    orders, audit = manager.get("orders", 0), manager.get("audit", 0)
    for first in range(60):
        for partition in (orders, audit):
            partition.append_as_leader(client_batch(3, first=first % 4), T0 + first)
    audit_before = audit.log.size_in_bytes
    assert manager.clean_logs([orders, audit], T0) > 0
    assert audit.log.size_in_bytes == audit_before, "a topic without cleanup.policy=compact is not compacted"
    metrics = manager.cleaner_metrics
    assert 0 < metrics.recopy_percent._value.get() < 100 and metrics.max_clean_time._value.get() > 0
    assert metrics.uncleanable._value.get() == 0
    def disk_fails(now_ms: int) -> None:
        raise OSError(5, "Input/output error")

    audit.clean = disk_fails
    with caplog.at_level("ERROR"):
        manager.clean_logs([audit], T0)
    assert "audit-0: log cleaning failed" in caplog.text and metrics.uncleanable._value.get() == 1
    caplog.clear()
    orders.close()
    with caplog.at_level("ERROR"):
        assert manager.clean_logs([orders], T0) == 0
    assert "cleaning failed" not in caplog.text and metrics.uncleanable._value.get() == 0


def test_a_config_set_replaced_by_the_legacy_alter_configs_is_applied_as_an_incremental_change_is(tmp_path):
    """The records of a legacy AlterConfigs (API 33) replayed into the image reconfigure the hosted partitions
    exactly as the same change said incrementally: keys not named go back to the broker's defaults."""
    start = image(topic("orders", ORDERS, [(1, [1])]), configs={(TOPIC_RESOURCE, "orders"): {
        "cleanup.policy": "compact", "retention.ms": "1000", "max.message.bytes": "2000"}})
    controller = QuorumController("c", ControllerConfig(), random.Random(1))
    legacy = controller.legacy_alter_configs(
        legacy_alter_configs_request((TOPIC_RESOURCE, "orders", [("retention.ms", "7200000")])), start)
    incremental = controller.incremental_alter_configs(alter_configs_request((TOPIC_RESOURCE, "orders", [
        ("retention.ms", 0, "7200000"), ("cleanup.policy", 1, None), ("max.message.bytes", 1, None)])), start)
    applied = []
    for result in (legacy, incremental):
        delta = MetadataDelta(start)
        for offset, value in enumerate(result.records):
            delta.replay(value, offset)
        manager = ReplicaManager(1, [tmp_path / str(len(applied))])
        manager.apply_image(start)
        before = manager.get("orders", 0).config
        assert (before.compacted, before.deletes, before.retention_ms, before.max_message_bytes) == (
            True, False, 1000, 2000)
        manager.apply_image(delta.apply())
        applied.append(manager.get("orders", 0).config)
        manager.close()
    after, incrementally = applied
    assert (after.compacted, after.deletes, after.retention_ms, after.max_message_bytes) == (
        False, True, 7200000, 1048588)
    assert after == incrementally


def test_an_acks_all_produce_consults_only_its_own_partitions_deadline(tmp_path, monkeypatch):
    """Each acks=all produce arms its timeout: scanning every led partition's tracker for the next
    deadline made it cost O(partitions led) (a broker leading __consumer_offsets' 50 partitions spent
    7% of its interpreter time there under a 200 records/s producer); only its own tracker is asked.
    The timeout still answers REQUEST_TIMED_OUT."""
    from quorum.broker.isr import IsrTracker
    from quorum.broker.leadership import Leadership

    manager = ReplicaManager(1, [tmp_path])
    leadership = Leadership(1, manager.notifier, lambda: None, lambda: 1)
    manager.on_open = leadership.manage
    led = image(topic("orders", ORDERS, [(1, [1, 2])] * 40, isr=[1, 2]))
    manager.apply_image(led)
    asked: list[IsrTracker] = []
    original = IsrTracker.next_deadline_ms

    def counted(tracker: IsrTracker) -> int | None:
        asked.append(tracker)
        return original(tracker)

    async def scenario() -> tuple[object, int]:
        leadership.apply_image(led, [manager.get("orders", index) for index in range(40)])
        monkeypatch.setattr(IsrTracker, "next_deadline_ms", counted)
        handlers = ProduceHandlers(manager, lambda: T0, replication=leadership)
        waiting = asyncio.create_task(handlers.produce(produce_request(9, -1, [("orders", 7, client_batch())],
                                                                       timeout_ms=200)))  # fmt: skip
        await asyncio.sleep(0.05)
        consulted = len({id(tracker) for tracker in asked})
        answer = await waiting
        await leadership.close()
        return answer, consulted

    answer, consulted = run(scenario())
    assert consulted == 1, f"an acks=all produce asked {consulted} partitions' trackers for their deadlines"
    assert answer.body.responses[0].partition_responses[0].error_code == ErrorCode.REQUEST_TIMED_OUT
    manager.close()
