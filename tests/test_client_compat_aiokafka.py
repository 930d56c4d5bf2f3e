"""Compatibility suite, fourth client: aiokafka 0.14 (pure Python, asyncio) on the suite's one-broker cluster.

aiokafka matters because it is old-fashioned on the wire: it sends no leader epochs (Fetch and
OffsetCommit without them) and asks Metadata at old versions, so the broker's handling of the low
API versions real deployments still meet is exercised here and nowhere else. Its flows, on the
same fresh one-broker cluster `tests.test_client_compat` gives each client:

1. the admin client creates the topic;
2. an idempotent producer (acks=all, lz4) writes keyed messages with headers;
3. a consumer reads them all back through a group subscription, byte for byte;
4. it commits with a metadata string, and a new consumer of the group and the admin client
   read the committed offsets (and the metadata) back;
5. the admin client deletes the topic, and the broker no longer lists it.

(Kept in its own module beside tests/test_client_compat.py, which is already at the size where
the guide splits a module.)
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from tests.test_broker_processes import one_broker
from tests.test_controller_processes import metadata, wait_until

pytestmark = pytest.mark.timeout(300)

TOPIC = "aiokafka-compat"
PARTITIONS = 3
COUNT = 3_000
GROUP = "aiokafka-group"
PAD = "the quick brown fox jumps over the lazy dog " * 3  # compressible, so lz4 does real work
DEADLINE_S = 60


def message(n: int) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    return f"key-{n}".encode(), f"aiokafka message {n} {PAD}".encode(), [("n", str(n).encode()), ("empty", b"")]


async def produce(address: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=address, enable_idempotence=True, acks="all",
                                compression_type="lz4", linger_ms=5)
    await producer.start()
    try:
        sent = []
        for n in range(COUNT):
            key, value, headers = message(n)
            sent.append(await producer.send(TOPIC, value, key=key, headers=headers))
        await producer.flush()
        results = await asyncio.wait_for(asyncio.gather(*sent), DEADLINE_S)
    finally:
        await producer.stop()
    assert {r.partition for r in results} == set(range(PARTITIONS))


async def consume_and_commit(address: str) -> dict[TopicPartition, int]:
    """Every message through the group; commits each partition's end with a metadata string."""
    consumer = AIOKafkaConsumer(TOPIC, bootstrap_servers=address, group_id=GROUP, auto_offset_reset="earliest",
                                enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500)
    await consumer.start()
    seen: dict[int, tuple[bytes, list[tuple[str, bytes]]]] = {}
    ends: dict[TopicPartition, int] = {}
    try:
        async def read_all() -> None:
            while len(seen) < COUNT:
                for tp, records in (await consumer.getmany(timeout_ms=1000)).items():
                    for record in records:
                        n = int(record.key.decode().removeprefix("key-"))
                        seen[n] = (record.value, list(record.headers))
                        ends[tp] = record.offset + 1

        await asyncio.wait_for(read_all(), DEADLINE_S)
        assert consumer.assignment() == {TopicPartition(TOPIC, p) for p in range(PARTITIONS)}
        await consumer.commit({tp: OffsetAndMetadata(end, f"aiokafka read p{tp.partition}")
                               for tp, end in ends.items()})
    finally:
        await consumer.stop()
    for n in range(COUNT):
        _, value, headers = message(n)
        assert seen[n] == (value, headers), n
    return ends


async def read_back(address: str, ends: dict[TopicPartition, int]) -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers=address, group_id=GROUP, enable_auto_commit=False)
    await consumer.start()
    try:
        assert {tp: await consumer.committed(tp) for tp in ends} == ends
    finally:
        await consumer.stop()
    admin = AIOKafkaAdminClient(bootstrap_servers=address)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(GROUP)
    finally:
        await admin.close()
    assert {tp: (o.offset, o.metadata) for tp, o in offsets.items()} == {
        tp: (end, f"aiokafka read p{tp.partition}") for tp, end in ends.items()}


async def admin_call(address: str, call) -> object:
    admin = AIOKafkaAdminClient(bootstrap_servers=address)
    await admin.start()
    try:
        return await asyncio.wait_for(call(admin), DEADLINE_S)
    finally:
        await admin.close()


def test_aiokafka(tmp_path):
    with one_broker(tmp_path) as (_, address):
        asyncio.run(admin_call(address, lambda admin: admin.create_topics(
            [NewTopic(TOPIC, PARTITIONS, 1)], timeout_ms=30_000)))
        wait_until("the topic with a leader for each partition", lambda: TOPIC in metadata(address)[1] and all(
            p.leader >= 0 for p in metadata(address)[1][TOPIC].partitions.values()))
        asyncio.run(produce(address))
        ends = asyncio.run(consume_and_commit(address))
        assert sum(ends.values()) == COUNT
        asyncio.run(read_back(address, ends))
        asyncio.run(admin_call(address, lambda admin: admin.delete_topics([TOPIC], timeout_ms=30_000)))
        wait_until("the topic gone from the broker", lambda: TOPIC not in metadata(address)[1] or None)
        assert TOPIC not in asyncio.run(admin_call(address, lambda admin: admin.list_topics()))
