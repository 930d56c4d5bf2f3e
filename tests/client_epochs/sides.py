"""The wrappers as the shared scenarios drive them (test_recreation.py, test_async_wrappers.py): one `_Side`
per client translates the calls every scenario needs (make a consumer, subscribe, assign, poll, commit,
read a commit, seek with internal metadata, a position with it) into that client's API.

The sync wrappers are called directly. The async ones (`client_epochs.aio.AIOConsumer`,
`client_epochs.aiokafka.AIOKafkaConsumer`) live on an event loop on a thread of the side's own
(tests/support/background_loop.BackgroundLoop): each call of a scenario runs the client's coroutine
there and waits for it with a deadline, so one scenario text serves all four. An async side hands
the scenario a `Driven` consumer: its `close()` stops the client on the loop, its other attributes
(`waiting_for_metadata`, `metadata_client`, `resets`) are the client's.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import aiokafka
import aiokafka.errors
import confluent_kafka
import confluent_kafka.aio
import kafka
import kafka.errors

from client_epochs.aio import AIOConsumer
from client_epochs.aiokafka import AIOKafkaConsumer
from client_epochs.confluent import Consumer
from client_epochs.errors import OffsetOutOfRangeError, TopicRecreatedError
from client_epochs.kafka_python import KafkaConsumer
from quorum.wire.errors import ErrorCode
from tests.support.background_loop import BackgroundLoop
from tests.test_broker_processes import QUIET

Record = tuple[int, int, bytes]
"""(partition, offset, value) of a delivered record."""


class _Side:
    """One wrapper, driven through the calls every scenario needs (each subclass translates them)."""

    def __init__(self, address: str) -> None:
        self.address = address

    def subscribe(self, consumer: Any, topic: str) -> None:
        consumer.subscribe([topic])

    out_of_range_error: type[Exception] = kafka.errors.OffsetOutOfRangeError
    """What the wrapper raises under the policy none where the data is gone (the client's own error)."""
    raw_keeps_position = True
    """Whether the raw client, manually assigned, goes on from its old position when its topic is deleted and
    created again (skipping the new topic's first records); see AIOKafkaSide for the one that does not."""

    def close(self) -> None:
        """What the side itself started (an async side's event loop thread)."""


class ConfluentSide(_Side):
    """client_epochs.confluent.Consumer."""

    name = "confluent"
    out_of_range_error: type[Exception] = OffsetOutOfRangeError
    """librdkafka has no error of its own for it: the wrapper raises the SDK's."""

    def consumer(self, group: str | None, reset: str = "earliest", **options: Any) -> Consumer:
        return Consumer(self.config(group, reset), **{"metadata_check_interval_s": 0.3, **options})

    def config(self, group: str | None, reset: str) -> dict[str, Any]:
        """The wrapper's settings. Group None (offsets kept outside Kafka, the partitions assigned): librdkafka
        wants a group.id all the same, and one that is never joined nor committed to is given."""
        return {"bootstrap.servers": self.address, "group.id": group or "never-joined", "enable.auto.commit": False,
                "auto.offset.reset": reset, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                "topic.metadata.refresh.interval.ms": 1000, **QUIET}

    def raw(self, group: str) -> confluent_kafka.Consumer:
        return confluent_kafka.Consumer({"bootstrap.servers": self.address, "group.id": group,
                                         "enable.auto.commit": False, "auto.offset.reset": "earliest", **QUIET})

    def assign(self, consumer: confluent_kafka.Consumer, topic: str) -> None:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0)])

    def poll(self, consumer: confluent_kafka.Consumer) -> list[Record]:
        """What one consume call delivers; error events (the topic is gone) are not records."""
        return [(m.partition(), m.offset(), m.value()) for m in consumer.consume(100, 0.3) if m.error() is None]

    def commit(self, consumer: Consumer, topic: str, offsets: dict[int, int]) -> None:
        consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, p, o) for p, o in offsets.items()],
                        asynchronous=False)

    def is_refusal(self, error: Exception) -> bool:
        """Whether a commit failed with INVALID_INTERNAL_METADATA (librdkafka keeps codes it does not know),
        or was refused by the wrapper itself, on a cluster that does not check (Apache Kafka)."""
        return isinstance(error, TopicRecreatedError) or isinstance(error, confluent_kafka.KafkaException) and \
            error.args[0].code() == ErrorCode.INVALID_INTERNAL_METADATA

    def committed(self, consumer: Consumer, topic: str, partition: int = 0) -> int | None:
        (entry,) = consumer.committed([confluent_kafka.TopicPartition(topic, partition)], timeout=10)
        return entry.offset if entry.offset >= 0 else None

    def seek(self, consumer: Consumer, topic: str, offset: int, internal: str) -> None:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, offset)])
        consumer.seek(confluent_kafka.TopicPartition(topic, 0), offset, internal)

    def position(self, consumer: Consumer, topic: str) -> tuple[int, str]:
        return consumer.position_with_internal_metadata(confluent_kafka.TopicPartition(topic, 0))

    def pause(self, consumer: Consumer, topic: str, pause: bool) -> None:
        """The user's pause (True) or resume (False) of partition 0."""
        (consumer.pause if pause else consumer.resume)([confluent_kafka.TopicPartition(topic, 0)])


class ConfluentKip848Side(ConfluentSide):
    """client_epochs.confluent.Consumer under KIP-848's `group.protocol=consumer`: the broker assigns, the
    session and heartbeat interval are the broker's (librdkafka refuses them in the client's settings)."""

    name = "confluent-kip848"

    def config(self, group: str | None, reset: str) -> dict[str, Any]:
        config = {**super().config(group, reset), "group.protocol": "consumer"}
        del config["session.timeout.ms"], config["heartbeat.interval.ms"]
        return config


class KafkaPythonSide(_Side):
    """client_epochs.kafka_python.KafkaConsumer."""

    name = "kafka-python"

    def consumer(self, group: str | None, reset: str = "earliest", **options: Any) -> KafkaConsumer:
        return KafkaConsumer(**self.config(group, reset), allow_auto_create_topics=False,
                             **{"metadata_check_interval_s": 0.3, **options})

    def config(self, group: str | None, reset: str) -> dict[str, Any]:
        """The settings kafka-python and aiokafka share."""
        return {"bootstrap_servers": self.address, "group_id": group, "enable_auto_commit": False,
                "auto_offset_reset": reset, "session_timeout_ms": 6000, "heartbeat_interval_ms": 500,
                "metadata_max_age_ms": 1000}

    def raw(self, group: str) -> kafka.KafkaConsumer:
        """metadata_max_age_ms 1 s, as the wrappers' (`config`): a kafka-python group leader whose metadata
        lacks the subscribed topic when it assigns ('No partition metadata for topic', seen under load) may
        assign nothing until its next refresh, 5 minutes by default (tests/test_client_compat.py says the same)."""
        return kafka.KafkaConsumer(bootstrap_servers=self.address, group_id=group, enable_auto_commit=False,
                                   auto_offset_reset="earliest", allow_auto_create_topics=False,
                                   metadata_max_age_ms=1000)

    def assign(self, consumer: kafka.KafkaConsumer, topic: str) -> None:
        consumer.assign([kafka.TopicPartition(topic, 0)])

    def poll(self, consumer: kafka.KafkaConsumer) -> list[Record]:
        return [(r.partition, r.offset, r.value) for records in consumer.poll(300).values() for r in records]

    def commit(self, consumer: KafkaConsumer, topic: str, offsets: dict[int, int]) -> None:
        consumer.commit({kafka.TopicPartition(topic, p): kafka.OffsetAndMetadata(o, "", -1)
                         for p, o in offsets.items()})

    def is_refusal(self, error: Exception) -> bool:
        """kafka-python raises an UnknownError subclass carrying a code it does not know (INVALID_INTERNAL_METADATA);
        the wrapper raises TopicRecreatedError itself on a cluster that does not check (Apache Kafka)."""
        return isinstance(error, TopicRecreatedError) or isinstance(error, kafka.errors.UnknownError) and \
            error.errno == ErrorCode.INVALID_INTERNAL_METADATA

    def committed(self, consumer: KafkaConsumer, topic: str, partition: int = 0) -> int | None:
        return consumer.committed(kafka.TopicPartition(topic, partition))

    def seek(self, consumer: KafkaConsumer, topic: str, offset: int, internal: str) -> None:
        consumer.assign([kafka.TopicPartition(topic, 0)])
        consumer.seek(kafka.TopicPartition(topic, 0), offset, internal)

    def position(self, consumer: KafkaConsumer, topic: str) -> tuple[int, str]:
        offset, internal = consumer.position_with_internal_metadata(kafka.TopicPartition(topic, 0))
        assert offset is not None
        return offset, internal

    def pause(self, consumer: KafkaConsumer, topic: str, pause: bool) -> None:
        (consumer.pause if pause else consumer.resume)(kafka.TopicPartition(topic, 0))


class Driven:
    """An async consumer driven from the test's thread: `close()` stops it on its loop (aiokafka's
    `stop()`, confluent-kafka's `close()`); other attributes are the consumer's own."""

    def __init__(self, loop: BackgroundLoop, client: Any) -> None:
        self.loop = loop
        self.client = client

    def run(self, coroutine: Any, timeout_s: float = 60.0) -> Any:
        return self.loop.run(coroutine, timeout_s)

    def close(self) -> None:
        stop = self.client.stop if isinstance(self.client, aiokafka.AIOKafkaConsumer) else self.client.close
        self.loop.run(stop(), 30, what=f"closing {type(self.client).__name__}")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


class _AsyncSide:
    """What both async sides share: the loop thread, started with the side and stopped by `close()`."""

    def __init__(self, address: str) -> None:
        super().__init__(address)  # type: ignore[call-arg]
        self.loop = BackgroundLoop(f"{self.name}-loop")  # type: ignore[attr-defined]

    def close(self) -> None:
        self.loop.close()

    @contextmanager
    def ticker(self, every_s: float = 0.01) -> Iterator[list[float]]:
        """A task on the side's loop that sleeps `every_s` again and again; yields the gaps between its
        ticks as they come (a gap well over `every_s`: something blocked the loop)."""
        gaps: list[float] = []
        stop = threading.Event()

        async def tick() -> None:
            last = time.monotonic()
            while not stop.is_set():
                await asyncio.sleep(every_s)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        running = asyncio.run_coroutine_threadsafe(tick(), self.loop.loop)
        try:
            yield gaps
        finally:
            stop.set()
            running.result(5)

    cancel_keeps_records = True
    """Whether records a cancelled poll had taken are still delivered by the next poll."""

    def cut_poll(self, consumer: Driven, after_s: float = 0.05) -> None:
        """A poll whose caller gives up after `after_s` (asyncio.wait_for cancels it), as a user's timeout does."""
        async def cut() -> None:
            with suppress(TimeoutError):
                await asyncio.wait_for(self.polling(consumer), after_s)
        consumer.run(cut())

    def polling(self, consumer: Driven) -> Any:
        """The coroutine of one poll."""
        raise NotImplementedError

    def _made(self, make: Any) -> Driven:
        async def made() -> Any:
            return await make()
        return Driven(self.loop, self.loop.run(made(), 60, what=f"starting a {self.name} consumer"))  # type: ignore[attr-defined]


class ConfluentAIOSide(_AsyncSide, ConfluentSide):
    """client_epochs.aio.AIOConsumer (confluent-kafka's asyncio consumer), raw: confluent_kafka.aio.AIOConsumer."""

    name = "confluent-aio"
    cancel_keeps_records = False
    """confluent-kafka's AIOConsumer runs each call to its end on a thread: what a consume whose caller was
    cancelled returns is lost to the user, with or without the wrapper."""

    def consumer(self, group: str | None, reset: str = "earliest", **options: Any) -> Driven:
        async def make() -> AIOConsumer:
            return AIOConsumer(self.config(group, reset), max_workers=4,
                               **{"metadata_check_interval_s": 0.3, **options})
        return self._made(make)

    def raw(self, group: str) -> Driven:
        async def make() -> confluent_kafka.aio.AIOConsumer:
            return confluent_kafka.aio.AIOConsumer({
                "bootstrap.servers": self.address, "group.id": group, "enable.auto.commit": False,
                "auto.offset.reset": "earliest", **QUIET}, max_workers=4)
        return self._made(make)

    def subscribe(self, consumer: Driven, topic: str) -> None:
        consumer.run(consumer.client.subscribe([topic]))

    def assign(self, consumer: Driven, topic: str) -> None:
        consumer.run(consumer.client.assign([confluent_kafka.TopicPartition(topic, 0)]))

    def polling(self, consumer: Driven) -> Any:
        return consumer.client.consume(100, 0.3)

    def poll(self, consumer: Driven) -> list[Record]:
        messages = consumer.run(self.polling(consumer))
        return [(m.partition(), m.offset(), m.value()) for m in messages if m.error() is None]

    def commit(self, consumer: Driven, topic: str, offsets: dict[int, int]) -> None:
        consumer.run(consumer.client.commit(
            offsets=[confluent_kafka.TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False))

    def committed(self, consumer: Driven, topic: str, partition: int = 0) -> int | None:
        (entry,) = consumer.run(consumer.client.committed([confluent_kafka.TopicPartition(topic, partition)],
                                                          timeout=10))
        return entry.offset if entry.offset >= 0 else None

    def seek(self, consumer: Driven, topic: str, offset: int, internal: str) -> None:
        consumer.run(consumer.client.assign([confluent_kafka.TopicPartition(topic, 0, offset)]))
        consumer.run(consumer.client.seek(confluent_kafka.TopicPartition(topic, 0), offset, internal))

    def position(self, consumer: Driven, topic: str) -> tuple[int, str]:
        return consumer.run(consumer.client.position_with_internal_metadata(confluent_kafka.TopicPartition(topic, 0)))

    def pause(self, consumer: Driven, topic: str, pause: bool) -> None:
        call = consumer.client.pause if pause else consumer.client.resume
        consumer.run(call([confluent_kafka.TopicPartition(topic, 0)]))


class AIOKafkaSide(_AsyncSide, KafkaPythonSide):
    """client_epochs.aiokafka.AIOKafkaConsumer, raw: aiokafka.AIOKafkaConsumer."""

    name = "aiokafka"
    out_of_range_error = aiokafka.errors.OffsetOutOfRangeError
    raw_keeps_position = False
    """Raw aiokafka 0.14 forgets the position of a partition whose topic left its metadata, and starts the new
    topic by its auto_offset_reset (its group committed nothing), reading from offset 0; but only when one of
    its metadata refreshes fell while the topic was gone: otherwise it goes on from its old position and
    skips, like the others (the full suite in CI saw both)."""

    def consumer(self, group: str | None, reset: str = "earliest", **options: Any) -> Driven:
        async def make() -> AIOKafkaConsumer:
            consumer = AIOKafkaConsumer(**self.config(group, reset), **{"metadata_check_interval_s": 0.3, **options})
            await consumer.start()
            return consumer
        return self._made(make)

    def raw(self, group: str) -> Driven:
        async def make() -> aiokafka.AIOKafkaConsumer:
            consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=self.address, group_id=group,
                                                 enable_auto_commit=False, auto_offset_reset="earliest")
            await consumer.start()
            return consumer
        return self._made(make)

    def subscribe(self, consumer: Driven, topic: str) -> None:
        self.loop.call(consumer.client.subscribe, [topic])

    def assign(self, consumer: Driven, topic: str) -> None:
        self.loop.call(consumer.client.assign, [aiokafka.TopicPartition(topic, 0)])

    def polling(self, consumer: Driven) -> Any:
        return consumer.client.getmany(timeout_ms=300)

    def poll(self, consumer: Driven) -> list[Record]:
        got = consumer.run(self.polling(consumer))
        return [(r.partition, r.offset, r.value) for records in got.values() for r in records]

    def commit(self, consumer: Driven, topic: str, offsets: dict[int, int]) -> None:
        """aiokafka commits only for assigned partitions: a consumer that does not hold these is assigned them."""
        partitions = {aiokafka.TopicPartition(topic, p): (o, "") for p, o in offsets.items()}
        if not set(partitions) <= consumer.client.assignment():
            self.loop.call(consumer.client.assign, list(partitions))
        consumer.run(consumer.client.commit(partitions))

    def is_refusal(self, error: Exception) -> bool:
        """aiokafka turns an error code it does not know (INVALID_INTERNAL_METADATA) into a bare UnknownError,
        dropping the code; the wrapper raises TopicRecreatedError itself on a cluster that does not check."""
        return isinstance(error, TopicRecreatedError | aiokafka.errors.UnknownError)

    def committed(self, consumer: Driven, topic: str, partition: int = 0) -> int | None:
        return consumer.run(consumer.client.committed(aiokafka.TopicPartition(topic, partition)))

    def seek(self, consumer: Driven, topic: str, offset: int, internal: str) -> None:
        tp = aiokafka.TopicPartition(topic, 0)
        self.loop.call(consumer.client.assign, [tp])
        self.loop.call(consumer.client.seek, tp, offset, internal)

    def position(self, consumer: Driven, topic: str) -> tuple[int, str]:
        return consumer.run(consumer.client.position_with_internal_metadata(aiokafka.TopicPartition(topic, 0)))

    def pause(self, consumer: Driven, topic: str, pause: bool) -> None:
        call = consumer.client.pause if pause else consumer.client.resume
        self.loop.call(call, aiokafka.TopicPartition(topic, 0))


Side = ConfluentSide | KafkaPythonSide | ConfluentAIOSide | AIOKafkaSide
SYNC_SIDES = [ConfluentSide, KafkaPythonSide]
ASYNC_SIDES = [ConfluentAIOSide, AIOKafkaSide]


@contextmanager
def side_of(kind: type[Side], address: str) -> Iterator[Side]:
    """A side for a test (a fixture's `request.param`), closed afterwards: an async side's loop stopped."""
    made = kind(address)
    try:
        yield made
    finally:
        made.close()


def consume(side: Side, consumer: Any, count: int, timeout_s: float = 30.0) -> list[Record]:
    """At least `count` records (fewer if `timeout_s` passes first)."""
    got: list[Record] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got += side.poll(consumer)
    return got


def poll_until(side: Side, consumer: Any, what: str, condition: Any, timeout_s: float = 30.0) -> list[Record]:
    """Poll until `condition()` holds or records come (AssertionError naming `what` if neither happens
    within `timeout_s`); the records polled."""
    got: list[Record] = []
    deadline = time.monotonic() + timeout_s
    while not condition() and not got:
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        got += side.poll(consumer)
    return got


def offsets_of(records: list[Record]) -> list[int]:
    return [offset for _, offset, _ in records]
