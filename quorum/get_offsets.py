"""`quorum get-offsets`: ListOffsets for a topic's partitions, as Kafka's `kafka-get-offsets.sh`.

`--time` takes Kafka's names (earliest -2, latest -1, max-timestamp -3, earliest-local -4,
latest-tiered -5, earliest-pending-upload -6) or a timestamp in ms; each partition's answer comes
from its leader (found with a Metadata request to the bootstrap servers) with ListOffsets v11, and
is printed as Kafka prints it: `topic:partition:offset`, one line per partition, an offset of -1
meaning none (for example -5 on a topic without tiered storage, or -6 while a new leader has not
yet learnt its highest uploaded offset).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from quorum.net.client_security import ClientSecurity
from quorum.net.peer_client import PeerClient, PeerUnavailable
from quorum.wire.errors import ErrorCode, error_name
from quorum.wire.protocol import APIS

TIME_SPECS = {"latest": -1, "earliest": -2, "max-timestamp": -3, "earliest-local": -4, "latest-tiered": -5,
              "earliest-pending-upload": -6}
METADATA = APIS[3]
LIST_OFFSETS = APIS[2]
METADATA_VERSION = 12
LIST_OFFSETS_VERSION = 11


RETRIABLE = frozenset({ErrorCode.OFFSET_NOT_AVAILABLE, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
                       ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.KAFKA_STORAGE_ERROR,
                       ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})
"""Answers the tool retries (after a fresh Metadata request) until its timeout, as Kafka's AdminClient does
(its ListOffsets handler retries every InvalidMetadataException). UNKNOWN_TOPIC_OR_PARTITION is among them:
the leader named by one broker's metadata may not have opened the partition's log yet."""
RETRY_BACKOFF_S = 0.2


class GetOffsetsError(RuntimeError):
    """What the tool could not get, naming the topic, partition and error; `retriable` when asking
    again later may succeed."""

    def __init__(self, message: str, retriable: bool = False) -> None:
        super().__init__(message)
        self.retriable = retriable


def parse_time(text: str) -> int:
    """A `--time` value: one of TIME_SPECS' names or a number (ms, or a negative spec)."""
    if text in TIME_SPECS:
        return TIME_SPECS[text]
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"--time must be one of {', '.join(TIME_SPECS)} or a timestamp in ms, got {text!r}") from None


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.strip().rpartition(":")
    return host or "127.0.0.1", int(port)


async def _list_offsets(bootstrap: str, topic: str, partitions: Sequence[int] | None, spec: int,
                        timeout_ms: int, security: ClientSecurity | None = None) -> dict[int, tuple[int, int]]:
    clients: dict[tuple[str, int], PeerClient] = {}

    def client(address: tuple[str, int]) -> PeerClient:
        if address not in clients:
            clients[address] = PeerClient(*address, "quorum-get-offsets", timeout_ms, security=security)
        return clients[address]

    try:
        meta = None
        for text in bootstrap.split(","):
            try:
                meta = await client(_address(text)).request(METADATA, METADATA_VERSION, METADATA.request(
                    topics=[METADATA.request.MetadataRequestTopic(name=topic, topic_id=None)],
                    allow_auto_topic_creation=False, include_topic_authorized_operations=False))
                break
            except PeerUnavailable:
                continue
        if meta is None:
            raise GetOffsetsError(f"no broker of {bootstrap} answered Metadata")
        brokers = {b.node_id: (b.host, b.port) for b in meta.brokers}
        found = next((t for t in meta.topics if t.name == topic), None)
        if found is None or found.error_code != ErrorCode.NONE:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if found is None else found.error_code
            # Retriable as in Kafka's clients: a broker names a new topic once its logs are open, a
            # moment after another broker does.
            retriable = code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE)
            raise GetOffsetsError(f"topic {topic}: {error_name(code)}", retriable=retriable)
        leaders = {p.partition_index: p.leader_id for p in found.partitions}
        wanted = sorted(leaders) if partitions is None else list(partitions)
        answers: dict[int, tuple[int, int]] = {}
        for partition in wanted:
            if partition not in leaders:
                raise GetOffsetsError(f"{topic}-{partition}: no such partition (the topic has {len(leaders)})")
            leader = brokers.get(leaders[partition])
            if leader is None:
                raise GetOffsetsError(f"{topic}-{partition}: no leader ({leaders[partition]})", retriable=True)
            request = LIST_OFFSETS.request(replica_id=-1, isolation_level=0, topics=[
                LIST_OFFSETS.request.ListOffsetsTopic(name=topic, partitions=[
                    LIST_OFFSETS.request.ListOffsetsTopic.ListOffsetsPartition(
                        partition_index=partition, current_leader_epoch=-1, timestamp=spec)])],
                timeout_ms=timeout_ms)
            response = await client(leader).request(LIST_OFFSETS, LIST_OFFSETS_VERSION, request)
            answer = response.topics[0].partitions[0]
            if answer.error_code != ErrorCode.NONE:
                raise GetOffsetsError(f"{topic}-{partition}: ListOffsets {spec} on broker {leaders[partition]}: "
                                      f"{error_name(answer.error_code)}", answer.error_code in RETRIABLE)
            answers[partition] = (answer.offset, answer.leader_epoch)
        return answers
    finally:
        for peer in clients.values():
            await peer.close()


def list_offsets(bootstrap: str, topic: str, partitions: Sequence[int] | None, spec: int,
                 timeout_ms: int = 10_000, security: ClientSecurity | None = None) -> dict[int, tuple[int, int]]:
    """Partition -> (offset, leader epoch) for `spec`; raises GetOffsetsError. Retriable answers
    (a leader moving, a tiered partition whose remote metadata is still being read) are asked
    again until `timeout_ms` has passed. `security`: TLS and SASL for a secured listener."""
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        try:
            return asyncio.run(_list_offsets(bootstrap, topic, partitions, spec, timeout_ms, security))
        except GetOffsetsError as exc:
            if not exc.retriable or time.monotonic() + RETRY_BACKOFF_S > deadline:
                raise
        time.sleep(RETRY_BACKOFF_S)


def format_offsets(topic: str, answers: dict[int, tuple[int, int]]) -> str:
    return "\n".join(f"{topic}:{partition}:{offset}" for partition, (offset, _) in sorted(answers.items()))
