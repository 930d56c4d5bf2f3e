"""Issue 21 as a user met it: topics auto-created by Metadata requests while other clients keep
asking for all the metadata. A broker once served such a topic with 0 partitions until it
restarted (a reader built the image while the replay thread was half-way through the batch).

Every answer any client gets lists each topic with its partitions (the controller writes a
topic's TopicRecord and PartitionRecords in one batch, and readers see whole catch-ups only), and
at the end every topic has them. The cluster runs with `quorum.test.verify.image` on (the test
suite's default), so the broker also stops, naming the field, if its image ever differs from a
replay of its log.

And a topic a broker names in Metadata is one it can serve at once: a Produce sent the moment the
answer arrives is appended, not refused as NOT_LEADER_OR_FOLLOWER while the broker still opens the
partition's log (issue 17 opens logs off the event loop; a producer that is not idempotent retries
such refusals out of order, which reordered a tiered test's records).
"""

from __future__ import annotations

import threading
import time

import pytest

from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS
from quorum.wire.records import Record, build_batch
from tests.test_broker_processes import BROKER, one_broker
from tests.test_null_fields import Connection

pytestmark = pytest.mark.timeout(300)

METADATA, PRODUCE = 3, 0
TOPICS = [f"fz-live-{n}" for n in range(40)]
Request = APIS[METADATA].request
ProduceRequest = APIS[PRODUCE].request


def produce_one(connection: Connection, topic: str) -> int:
    """Append one record to partition 0 of `topic` (acks=1); the partition's error code."""
    data = ProduceRequest.TopicProduceData
    body = ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[data(
        name=topic, partition_data=[data.PartitionProduceData(index=0, records=build_batch([Record(0, 0, None, b"x",
                                                                                                  [])]))])])
    answer = connection.call(PRODUCE, 9, body)
    assert answer is not None, "the broker closed the Produce connection"
    return answer.responses[0].partition_responses[0].error_code


def partitions_by_topic(answer) -> dict[str, int]:
    return {t.name: len(t.partitions) for t in answer.topics if t.error_code == ErrorCode.NONE}


def test_a_topic_never_shows_without_its_partitions_while_topics_are_auto_created(tmp_path) -> None:
    with one_broker(tmp_path, {"num.partitions": "2"}) as (cluster, _):
        port = cluster.specs[BROKER].port
        done = threading.Event()
        empty: list[str] = []
        refused: list[str] = []
        answers = [0]
        failures: list[BaseException] = []

        def ask_for_everything() -> None:
            connection = Connection(port)
            try:
                while not done.is_set():
                    answer = connection.call(METADATA, 12, Request(topics=None, allow_auto_topic_creation=False,
                                                                   include_topic_authorized_operations=False))
                    assert answer is not None, "the broker closed a Metadata connection"
                    answers[0] += 1
                    empty.extend(name for name, count in partitions_by_topic(answer).items() if count != 2)
            except BaseException as exc:  # handed to the test thread
                failures.append(exc)
            finally:
                connection.close()

        readers = [threading.Thread(target=ask_for_everything, name=f"reader-{n}") for n in range(2)]
        for reader in readers:
            reader.start()
        creator = Connection(port)
        try:
            for name in TOPICS:
                topic = Request.MetadataRequestTopic(name=name, topic_id=None)
                answer = creator.call(METADATA, 12, Request(topics=[topic], allow_auto_topic_creation=True,
                                                            include_topic_authorized_operations=False))
                assert answer is not None
                seen = partitions_by_topic(answer)
                empty.extend(name for name, count in seen.items() if count != 2)
                if name in seen:
                    refused.extend(f"{name}: {ErrorCode(code).name}"
                                   for code in [produce_one(creator, name)] if code != ErrorCode.NONE)
        finally:
            done.set()
            for reader in readers:
                reader.join(60)
            creator.close()
        assert not failures, failures
        assert not empty, f"topics answered without their 2 partitions: {sorted(set(empty))}"
        assert not refused, f"a Produce right after Metadata named the topic was refused: {refused}"
        final = Connection(port)
        try:  # the last creation may still be opening its logs: the broker names it once they are open
            deadline = time.monotonic() + 30
            while True:
                answer = final.call(METADATA, 12, Request(topics=None, allow_auto_topic_creation=False,
                                                          include_topic_authorized_operations=False))
                if answer is None or partitions_by_topic(answer) == dict.fromkeys(TOPICS, 2):
                    break
                assert time.monotonic() < deadline, f"after 30 s the broker names {partitions_by_topic(answer)}"
                time.sleep(0.05)
        finally:
            final.close()
        assert answer is not None and partitions_by_topic(answer) == dict.fromkeys(TOPICS, 2)
        assert answers[0] > 0
        assert cluster.alive() == sorted(cluster.specs), "a node stopped (an image check failed?)"
