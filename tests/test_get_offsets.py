"""`quorum get-offsets`' retries, against a scripted broker on a real socket: an answer Kafka's
AdminClient retries (a partition its leader has not opened yet) is asked again after a fresh
Metadata request; one it does not (an authorization failure) is raised at once, naming the partition."""

from __future__ import annotations

import asyncio
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from quorum.get_offsets import GetOffsetsError, list_offsets
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS, Request, decode_request, encode_response

METADATA = APIS[3]
LIST_OFFSETS = APIS[2]
TOPIC = "orders"


class ScriptedBroker:
    """One broker leading partition 0 of TOPIC whose ListOffsets answers are the given error codes,
    then offset 42; it counts the Metadata and ListOffsets requests it got."""

    def __init__(self, list_offsets_errors: list[int]) -> None:
        self.errors = list(list_offsets_errors)
        self.requests = {"metadata": 0, "list_offsets": 0}
        self.port = 0

    def answer(self, request: Request) -> bytes:
        if request.api is METADATA:
            self.requests["metadata"] += 1
            Topic = METADATA.response.MetadataResponseTopic
            body = METADATA.response(throttle_time_ms=0, cluster_id="c", controller_id=1, brokers=[
                METADATA.response.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=self.port, rack=None)],
                topics=[Topic(error_code=0, name=TOPIC, topic_id=None, is_internal=False, partitions=[
                    Topic.MetadataResponsePartition(error_code=0, partition_index=0, leader_id=1, leader_epoch=3,
                                                    replica_nodes=[1], isr_nodes=[1], offline_replicas=[])])])
            return encode_response(request, body)
        self.requests["list_offsets"] += 1
        error = self.errors.pop(0) if self.errors else ErrorCode.NONE
        Topic = LIST_OFFSETS.response.ListOffsetsTopicResponse
        body = LIST_OFFSETS.response(throttle_time_ms=0, topics=[Topic(name=TOPIC, partitions=[
            Topic.ListOffsetsPartitionResponse(partition_index=0, error_code=error, timestamp=-1,
                                               offset=-1 if error else 42, leader_epoch=-1 if error else 3)])])
        return encode_response(request, body)

    async def serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                writer.write(self.answer(decode_request(await reader.readexactly(size))))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


@contextmanager
def scripted_broker(list_offsets_errors: list[int]) -> Iterator[ScriptedBroker]:
    """The broker served on its own event loop thread (list_offsets runs its own loop), stopped on exit."""
    broker = ScriptedBroker(list_offsets_errors)
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(asyncio.start_server(broker.serve_connection, "127.0.0.1", 0))
    broker.port = server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield broker
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        server.close()
        loop.run_until_complete(server.wait_closed())
        loop.close()


@pytest.mark.parametrize("error", [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                   ErrorCode.OFFSET_NOT_AVAILABLE])
def test_a_partition_its_leader_has_not_opened_yet_is_asked_again_after_fresh_metadata(error: int) -> None:
    with scripted_broker([error, error]) as broker:
        answers = list_offsets(f"127.0.0.1:{broker.port}", TOPIC, None, -1, timeout_ms=10_000)
    assert answers == {0: (42, 3)}
    assert broker.requests == {"metadata": 3, "list_offsets": 3}


def test_an_answer_kafka_does_not_retry_is_raised_at_once_naming_the_partition_and_broker() -> None:
    refused = f"{TOPIC}-0: ListOffsets -1 on broker 1: TOPIC_AUTHORIZATION_FAILED"
    with scripted_broker([ErrorCode.TOPIC_AUTHORIZATION_FAILED]) as broker, \
            pytest.raises(GetOffsetsError, match=refused):
        list_offsets(f"127.0.0.1:{broker.port}", TOPIC, None, -1, timeout_ms=10_000)
    assert broker.requests["list_offsets"] == 1


def test_a_partition_still_unknown_at_the_deadline_fails_naming_the_error() -> None:
    with scripted_broker([ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 1000) as broker, \
            pytest.raises(GetOffsetsError, match="UNKNOWN_TOPIC_OR_PARTITION") as failed:
        list_offsets(f"127.0.0.1:{broker.port}", TOPIC, None, -1, timeout_ms=1_000)
    assert failed.value.retriable and 2 <= broker.requests["list_offsets"] < 1000
