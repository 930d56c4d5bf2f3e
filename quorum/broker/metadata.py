"""Answer Metadata requests from a metadata image, at whatever version the client asked.

Pure function of (image, request): no I/O, so the same code serves the network shell, the
simulator and the benchmarks. Each topic carries the KIP-232 topic_epoch tag from v9 on, unless
the broker runs as Apache Kafka does (`topic_epochs=False`: `quorum.kip232.enable=false`).

A replayed image is answered as Kafka's KRaftMetadataCache answers it: the brokers listed are
the image's `brokers` (unfenced, with an endpoint of the image's listener); every replica is
listed, the unusable ones in offline_replicas too. A partition whose leader is not a listed
broker (no leader, or one not registered, fenced or without the listener) gets leader -1 and
LEADER_NOT_AVAILABLE with its leader epoch, which clients retry. Kafka would still name a fenced
leader, and answers LISTENER_NOT_FOUND (72) for one without the listener; this names no broker
that the response does not list (the controller moves leadership off a fenced broker anyway).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from quorum.broker.auto_create import INTERNAL_TOPICS, missing_topic_error
from quorum.image.image import NO_LEADER, MetadataImage, TopicInfo
from quorum.wire.errors import ErrorCode
from quorum.wire.metadata_response import encode_topics, splice_topics
from quorum.wire.protocol import APIS

METADATA = APIS[3]
_Response = METADATA.response
_Broker = _Response.MetadataResponseBroker
_Topic = _Response.MetadataResponseTopic
_Partition = _Topic.MetadataResponsePartition
_ZERO_UUID = uuid.UUID(int=0)


def requested_topics(image: MetadataImage, request: Any, version: int) -> list[TopicInfo | tuple[str | None, Any]]:
    """The topics a request names, found or not; None (or [] at v0) asks for all of them."""
    wanted = request.topics
    if wanted is None or (version == 0 and not wanted):
        return list(image.topics.values())
    found: list[TopicInfo | tuple[str | None, Any]] = []
    for entry in wanted:
        topic_id = getattr(entry, "topic_id", None) if version >= 10 else None
        topic = None
        if entry.name is not None:
            topic = image.topics.get(entry.name)
        elif topic_id is not None and topic_id != _ZERO_UUID:
            topic = image.topics_by_id.get(topic_id)
        found.append(topic if topic is not None else (entry.name, topic_id))
    return found


def _topic_entry(image: MetadataImage, topic: TopicInfo, topic_epochs: bool = True) -> Any:
    """The topic's response entry. It depends on the image's brokers only through the availability
    of the brokers the topic names, whose changes make the next image drop the topic's memo.
    Without `topic_epochs` the KIP-232 tag is left out (-1 is its default), as Kafka sends none."""
    brokers = image.brokers
    partitions = []
    for p in topic.partitions:
        listed = p.leader in brokers
        leader, error = (p.leader, ErrorCode.NONE) if listed else (NO_LEADER, ErrorCode.LEADER_NOT_AVAILABLE)
        partitions.append(_Partition(error_code=error, partition_index=p.partition, leader_id=leader,
                                     leader_epoch=p.leader_epoch, replica_nodes=list(p.replicas),
                                     isr_nodes=list(p.isr), offline_replicas=list(p.offline_replicas)))  # fmt: skip
    return _Topic(error_code=ErrorCode.NONE, name=topic.name, topic_id=topic.topic_id,
                  is_internal=topic.is_internal, partitions=partitions,
                  topic_epoch=topic.topic_epoch if topic_epochs else -1)


def _authorized(items: list[TopicInfo | tuple[str | None, Any]], refused: Callable[[str], bool],
                all_topics: bool) -> list[TopicInfo | tuple[str | None, Any]]:
    """The requested topics with the refused ones left out (all topics) or marked (named ones)."""
    if all_topics:
        return [item for item in items if not (isinstance(item, TopicInfo) and refused(item.name))]
    out: list[TopicInfo | tuple[str | None, Any]] = []
    for item in items:
        name = item.name if isinstance(item, TopicInfo) else item[0]
        out.append((name, _REFUSED) if name is not None and refused(name) else item)
    return out


_REFUSED = object()
"""In place of a topic id: this named topic is answered TOPIC_AUTHORIZATION_FAILED."""


def _unknown_topic_entry(name: str | None, topic_id: Any) -> Any:
    if topic_id is _REFUSED:
        return _Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=_ZERO_UUID,
                      is_internal=False, partitions=[])
    if name is None:
        return _Topic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=topic_id or _ZERO_UUID,
                      is_internal=False, partitions=[])
    # INVALID_TOPIC_EXCEPTION for a name Kafka's Topic.validate refuses, else UNKNOWN_TOPIC_OR_PARTITION
    return _Topic(error_code=missing_topic_error(name), name=name, topic_id=topic_id or _ZERO_UUID,
                  is_internal=name in INTERNAL_TOPICS, partitions=[])


def encoded_metadata_response(image: MetadataImage, request: Any, version: int,
                              refused: Callable[[str], bool] | None = None, topic_epochs: bool = True) -> bytes:
    """The encoded MetadataResponse body, reusing the image's memo of encoded topics.

    Same bytes as encoding metadata_response(); what a node sends on the wire. `refused` (issue 18,
    `quorum.security.authorization.metadata_refusals`) names the topics the principal may not see:
    left out of an all-topics answer, answered TOPIC_AUTHORIZATION_FAILED when named (whether they
    exist or not, so their existence is not disclosed). `topic_epochs`: see _topic_entry; a node
    serves one way all its life, so the image's memo holds one encoding per topic and version.
    """
    items = requested_topics(image, request, version)
    if refused is not None:
        items = _authorized(items, refused, all_topics=request.topics is None or (version == 0 and not request.topics))
    missing = [item for item in items if not isinstance(item, TopicInfo) or (item.name, version) not in image.encoded]
    fresh = iter(encode_topics(_Response, [_topic_entry(image, item, topic_epochs) if isinstance(item, TopicInfo)
                                           else _unknown_topic_entry(*item) for item in missing], version))
    entries = []
    for item in items:
        if not isinstance(item, TopicInfo):
            entries.append(next(fresh))
            continue
        key = (item.name, version)
        if key not in image.encoded:
            image.encoded[key] = next(fresh)
        entries.append(image.encoded[key])
    return splice_topics(_Response, _response_shell(image, []), version, entries)


def memo_difference(image: MetadataImage, topic_epochs: bool = True) -> str | None:
    """The first entry of the image's memo of encoded topics that a fresh encoding disagrees with
    (the image check of `quorum.test.verify.image`: what Metadata serves, not only the image, must
    be what a replay gives); None when every entry is right. Safe while the event loop adds
    entries: the items are listed in one C call, and encoding buffers are per thread."""
    for (name, version), served in list(image.encoded.items()):
        topic = image.topics.get(name)
        if topic is None:
            continue  # never served: requests find topics in image.topics first
        (fresh,) = encode_topics(_Response, [_topic_entry(image, topic, topic_epochs)], version)
        if fresh != served:
            return (f"the Metadata v{version} encoding of topic {name!r} held for the image is stale: "
                    f"{len(served)} bytes served, {len(fresh)} bytes for its {len(topic.partitions)} partitions now")
    return None


def _response_shell(image: MetadataImage, topics: list[Any]) -> Any:
    brokers = [_Broker(node_id=b.node_id, host=b.host, port=b.port, rack=b.rack) for b in image.brokers.values()]
    return _Response(throttle_time_ms=0, brokers=brokers, cluster_id=image.cluster_id,
                     controller_id=image.controller_id, topics=topics, error_code=ErrorCode.NONE)


def metadata_response(image: MetadataImage, request: Any, version: int, topic_epochs: bool = True) -> Any:
    """The MetadataResponse body for `request` (already decoded at `version`)."""
    topics = [
        _topic_entry(image, item, topic_epochs) if isinstance(item, TopicInfo) else _unknown_topic_entry(*item)
        for item in requested_topics(image, request, version)
    ]
    return _response_shell(image, topics)
