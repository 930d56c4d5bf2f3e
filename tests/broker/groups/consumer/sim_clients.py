"""Simulated KIP-848 consumers for driving the sans-IO rules: each keeps what a real consumer keeps
(member id, epoch, owned partitions) and reacts to answers as librdkafka and the Java consumer do:
it gives up revoked partitions before its next heartbeat, takes assigned ones, rejoins at epoch 0
with nothing after FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID, and sends its full state after a
heartbeat whose answer it never got."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from quorum.broker.groups.config import GroupConfig
from quorum.broker.groups.consumer.assignors import Partitions, TopicInfo
from quorum.broker.groups.consumer.events import ConsumerHeartbeat, ConsumerHeartbeatAnswer
from quorum.broker.groups.consumer.group import ConsumerGroup
from quorum.broker.groups.consumer.records import GroupLoader, image, records
from quorum.broker.groups.consumer.rules import ConsumerGroupRules, validate
from quorum.wire.consumer_offsets import decode_record
from quorum.wire.errors import ErrorCode as E

T = TypeVar("T")
GROUP = "kip848-group"
REBALANCE_MS = 4_000
CONFIG = GroupConfig(
    group_consumer_session_timeout_ms=3_000,
    group_consumer_min_session_timeout_ms=1_000,
    group_consumer_heartbeat_interval_ms=500,
    group_consumer_min_heartbeat_interval_ms=100,
)


def topic_info(name: str, partitions: int) -> TopicInfo:
    return TopicInfo(uuid.uuid5(uuid.NAMESPACE_DNS, name), partitions)


@dataclass
class SimClient:
    member_id: str
    topics: tuple[str, ...]
    regex: str | None = None
    instance_id: str | None = None
    """A static member's group.instance.id (sent in every heartbeat, as the Java consumer does)."""
    epoch: int = 0
    owned: frozenset = frozenset()
    full_next: bool = True
    """Send every field in the next heartbeat (the first one, and after a lost answer)."""
    left: bool = False

    def request(self, leave_epoch: int | None = None) -> ConsumerHeartbeat:
        if leave_epoch is not None:
            return ConsumerHeartbeat(GROUP, self.member_id, leave_epoch, instance_id=self.instance_id)
        full = self.full_next or self.epoch == 0
        return ConsumerHeartbeat(
            GROUP,
            self.member_id,
            self.epoch,
            instance_id=self.instance_id,
            rebalance_timeout_ms=REBALANCE_MS if full else -1,
            subscribed_topic_names=self.topics if full else None,
            subscribed_topic_regex=self.regex if full else None,
            owned=frozenset() if self.epoch == 0 else self.owned,
        )

    def receive(self, answer: ConsumerHeartbeatAnswer) -> None:
        if answer.error in (E.FENCED_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID, E.UNRELEASED_INSTANCE_ID):
            self.owned, self.epoch, self.full_next = frozenset(), 0, True
            return
        assert answer.error == E.NONE, answer
        self.epoch = answer.member_epoch
        self.full_next = False
        if answer.assignment is not None:
            self.owned = answer.assignment


@dataclass
class SimGroup:
    """One group, its rules and its clients, at a simulated time."""

    rules: ConsumerGroupRules = field(default_factory=lambda: ConsumerGroupRules(CONFIG))
    group: ConsumerGroup = field(default_factory=lambda: ConsumerGroup(GROUP))
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    clients: dict[str, SimClient] = field(default_factory=dict)
    now: int = 1_000_000
    log: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    """The records the group's steps wrote to `__consumer_offsets`, in order."""
    loader: GroupLoader = field(default_factory=GroupLoader)
    """Those records replayed as they were written, as a loading coordinator replays them."""

    def send(
        self, client: SimClient, leave: bool = False, lose_answer: bool = False, leave_epoch: int = -1
    ) -> ConsumerHeartbeatAnswer:
        answer = self.send_raw(client.request(leave_epoch if leave else None))
        if lose_answer:
            client.full_next = True
        elif not leave:
            client.receive(answer)
        return answer

    def send_raw(self, request: ConsumerHeartbeat) -> ConsumerHeartbeatAnswer:
        refused = validate(request, CONFIG.group_consumer_assignors)
        if refused is not None:
            return refused
        self._logged(lambda: self.rules.expire(self.group, self.now))
        return self._logged(lambda: self.rules.heartbeat(self.group, request, self.now, self.topics))

    def advance(self, ms: int) -> list[str]:
        self.now += ms
        return self._logged(lambda: self.rules.expire(self.group, self.now))

    def _logged(self, step: Callable[[], T]) -> T:
        """Run a step of the rules and log the records it writes, as the coordinator appends them."""
        before = image(self.group)
        result = step()
        for key, value in records(GROUP, before, image(self.group)):
            self.log.append((key, value))
            self.loader.replay(*decode_record(key, value))
        return result

    def reloaded(self) -> ConsumerGroup | None:
        """The group as a coordinator that loads the log rebuilds it."""
        return self.loader.groups().get(GROUP)

    def live_members(self) -> Mapping[str, SimClient]:
        return {m: c for m, c in self.clients.items() if m in self.group.members}

    def settle(self, rounds: int = 12) -> None:
        """Heartbeat every client each interval until the group is stable (crashed members expire)."""
        interval = CONFIG.group_consumer_heartbeat_interval_ms
        for _ in range(rounds + CONFIG.group_consumer_session_timeout_ms // interval):
            self.advance(interval)
            for client in self.clients.values():
                self.send(client)

    def check_owners(self) -> None:
        """What each member's client believes it owns, the coordinator holds as that member's, so no
        partition is believed owned by two members; and the coordinator's owner epochs are its members'."""
        seen: dict[tuple, str] = {}
        for member_id, client in self.live_members().items():
            member = self.group.members[member_id]
            held: Partitions = member.assigned | member.pending_revocation
            assert client.owned <= held, (member_id, client.owned - held)
            for tp in client.owned:
                assert tp not in seen, f"{tp} owned by {seen[tp]} and {member_id}"
                seen[tp] = member_id
        for tp, (member_id, epoch) in self.group.owners.items():
            member = self.group.members[member_id]
            assert tp in member.assigned | member.pending_revocation and epoch == member.member_epoch
