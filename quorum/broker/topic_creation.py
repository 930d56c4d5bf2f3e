"""Topics a broker creates on its own: `__consumer_offsets`, and topics clients ask for by name.

A Kafka broker creates the offsets topic the first time a group needs a coordinator, and (with
`auto.create.topics.enable`, true by default) a topic a producer or consumer names in a Metadata
request that allows it. Either way it is an ordinary CreateTopics the broker sends the active
controller on its controller channel, so the topic gets its id, placement and KIP-232 topic epoch
like any other; the broker then serves it once it has replayed the records.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from quorum.net.peer_client import PeerClient, PeerUnavailable
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS

log = logging.getLogger(__name__)

CREATE_TOPICS = APIS[19]
CREATE_TOPICS_VERSION = 5
OFFSETS_TOPIC = "__consumer_offsets"
CREATE_TIMEOUT_MS = 10_000


@dataclass(frozen=True, slots=True)
class TopicDefaults:
    """The broker settings that shape the topics it creates itself, with Kafka's defaults."""

    auto_create: bool = True  # auto.create.topics.enable
    num_partitions: int = 1  # num.partitions
    replication_factor: int = 1  # default.replication.factor
    offsets_partitions: int = 50  # offsets.topic.num.partitions
    offsets_replication_factor: int = 3  # offsets.topic.replication.factor
    offsets_segment_bytes: int = 100 * 1024 * 1024  # offsets.topic.segment.bytes

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> TopicDefaults:
        def number(key: str, default: int) -> int:
            value = props.get(key)
            try:
                return default if value is None else int(value)
            except ValueError:
                raise ValueError(f"{key} must be a whole number, not {value!r}") from None

        auto = props.get("auto.create.topics.enable", "true").strip().lower()
        if auto not in ("true", "false"):
            raise ValueError(f"auto.create.topics.enable must be true or false, not {auto!r}")
        return cls(auto == "true", number("num.partitions", 1), number("default.replication.factor", 1),
                   number("offsets.topic.num.partitions", 50), number("offsets.topic.replication.factor", 3),
                   number("offsets.topic.segment.bytes", 100 * 1024 * 1024))


class TopicCreator:
    """Sends CreateTopics for the broker's own needs to the active controller."""

    def __init__(self, controller: Callable[[], PeerClient | None], defaults: TopicDefaults) -> None:
        self._controller = controller
        self.defaults = defaults

    async def create_offsets_topic(self) -> int:
        """Create `__consumer_offsets` (compacted, as Kafka's); the error code, NONE when it exists."""
        d = self.defaults
        return await self.create(OFFSETS_TOPIC, d.offsets_partitions, d.offsets_replication_factor,
                                 {"cleanup.policy": "compact", "segment.bytes": str(d.offsets_segment_bytes)})

    async def auto_create(self, name: str) -> int:
        """Create a topic a client named, with the broker's defaults (auto.create.topics.enable)."""
        if not self.defaults.auto_create:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return await self.create(name, self.defaults.num_partitions, self.defaults.replication_factor)

    async def create(self, name: str, partitions: int, replication_factor: int,
                     configs: Mapping[str, str] | None = None) -> int:
        """One CreateTopics; NONE also when the topic already exists (another broker was first)."""
        peer = self._controller()
        if peer is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE if name == OFFSETS_TOPIC else ErrorCode.LEADER_NOT_AVAILABLE
        schema = CREATE_TOPICS.request
        topic = schema.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=replication_factor, assignments=[],
            configs=[schema.CreatableTopic.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])
        body = schema(topics=[topic], timeout_ms=CREATE_TIMEOUT_MS, validate_only=False)
        try:
            response = await peer.request(CREATE_TOPICS, CREATE_TOPICS_VERSION, body)
        except PeerUnavailable as exc:
            log.info("creating topic %s: %s", name, exc)
            return ErrorCode.LEADER_NOT_AVAILABLE
        error = next((t.error_code for t in response.topics if t.name == name), ErrorCode.UNKNOWN_SERVER_ERROR)
        if error == ErrorCode.TOPIC_ALREADY_EXISTS:
            return ErrorCode.NONE
        if error != ErrorCode.NONE:
            log.warning("creating topic %s (%d partitions, replication factor %d) failed: error %d",
                        name, partitions, replication_factor, error)
        else:
            log.info("created topic %s (%d partitions, replication factor %d)", name, partitions,
                     replication_factor)
        return error
