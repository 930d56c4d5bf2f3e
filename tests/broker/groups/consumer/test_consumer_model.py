"""The KIP-848 rules driven through joins, leaves, crashes, lost answers, static restarts, coordinator
moves, subscription and partition count changes by hypothesis: after every step no partition is
believed owned by two members (and what a member's client owns, the coordinator holds as that
member's), and the records written so far rebuild the group exactly (a coordinator that moves
resumes it); once the clients have heartbeated for a while, every partition of every subscribed
topic is owned by exactly one client."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from quorum.broker.groups.consumer.group import ConsumerGroup
from tests.broker.groups.consumer.sim_clients import GROUP, SimClient, SimGroup, topic_info

TOPICS = ("orders", "payments", "audit")
REGEXES = (None, "pay.*", "a.*|orders")
"""Subscriptions by regex; `audit` does not exist at first, so a regex picks it up once it is created."""


def subscribes(client: SimClient, name: str) -> bool:
    return name in client.topics or (client.regex is not None and re.fullmatch(client.regex, name) is not None)


class ConsumerGroupModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.sim = SimGroup(topics={"orders": topic_info("orders", 4), "payments": topic_info("payments", 3)})
        self.next_id = 0

    def _client(self, index: int) -> SimClient:
        clients = list(self.sim.clients.values())
        return clients[index % len(clients)]

    @rule(topics=st.sets(st.sampled_from(TOPICS)), regex=st.sampled_from(REGEXES), static=st.booleans())
    def join(self, topics: set[str], regex: str | None, static: bool) -> None:
        if not topics and regex is None:
            return
        self.next_id += 1
        client = SimClient(f"m{self.next_id}", tuple(sorted(topics)), regex, f"i{self.next_id}" if static else None)
        self.sim.clients[client.member_id] = client
        self.sim.send(client)

    @precondition(lambda self: self.sim.clients)
    @rule(index=st.integers(0, 20), lose=st.booleans())
    def heartbeat(self, index: int, lose: bool) -> None:
        self.sim.send(self._client(index), lose_answer=lose)

    @precondition(lambda self: self.sim.clients)
    @rule(index=st.integers(0, 20))
    def leave(self, index: int) -> None:
        client = self._client(index)
        del self.sim.clients[client.member_id]
        self.sim.send(client, leave=True)

    @precondition(lambda self: any(c.instance_id for c in self.sim.clients.values()))
    @rule(index=st.integers(0, 20), lose=st.booleans())
    def static_restart(self, index: int, lose: bool) -> None:
        """A static member leaves for a while (epoch -2) and comes back under a new member id with the
        same instance id; `lose` loses the leave, so the newcomer finds its instance id still held."""
        static = [c for c in self.sim.clients.values() if c.instance_id]
        old = static[index % len(static)]
        del self.sim.clients[old.member_id]
        if not lose:
            self.sim.send(old, leave=True, leave_epoch=-2)
        self.next_id += 1
        new = SimClient(f"m{self.next_id}", old.topics, old.regex, old.instance_id)
        self.sim.clients[new.member_id] = new
        self.sim.send(new)

    @precondition(lambda self: self.sim.clients)
    @rule(index=st.integers(0, 20))
    def crash(self, index: int) -> None:
        """kill -9: the client is gone; the coordinator learns it when the session lapses."""
        del self.sim.clients[self._client(index).member_id]

    @precondition(lambda self: self.sim.clients)
    @rule(index=st.integers(0, 20), topics=st.sets(st.sampled_from(TOPICS), min_size=1))
    def resubscribe(self, index: int, topics: set[str]) -> None:
        client = self._client(index)
        client.topics, client.full_next = tuple(sorted(topics)), True
        self.sim.send(client)

    @rule(name=st.sampled_from(TOPICS), more=st.integers(1, 3))
    def add_partitions(self, name: str, more: int) -> None:
        """A topic gains partitions, or (`audit`) is created."""
        current = self.sim.topics.get(name)
        self.sim.topics[name] = topic_info(name, (current.partitions if current else 0) + more)

    @rule()
    def move_coordinator(self) -> None:
        """The coordinator moves: the group goes on as the new one loads it from the records written so far."""
        reloaded = self.sim.reloaded()
        self.sim.group = reloaded if reloaded is not None else ConsumerGroup(GROUP)
        self.sim.rules.resume(self.sim.group, self.sim.now)

    @rule(ms=st.integers(0, 1_500))
    def advance(self, ms: int) -> None:
        self.sim.advance(ms)

    @rule()
    def settle_and_check_coverage(self) -> None:
        self.sim.settle()
        owned: dict[tuple, str] = {}
        for member_id, client in self.sim.clients.items():
            for tp in client.owned:
                assert tp not in owned
                owned[tp] = member_id
        wanted = {
            (info.topic_id, p)
            for name, info in self.sim.topics.items()
            if any(subscribes(c, name) for c in self.sim.clients.values())
            for p in range(info.partitions)
        }
        assert set(owned) == wanted, (wanted - set(owned), set(owned) - wanted)
        assert self.sim.group.state.value in ("Stable", "Empty")

    @invariant()
    def one_owner_per_partition(self) -> None:
        self.sim.check_owners()

    @invariant()
    def the_records_rebuild_the_group(self) -> None:
        """A coordinator that moves (loads the partition's records) resumes the group exactly."""
        group, reloaded = self.sim.group, self.sim.reloaded()
        if reloaded is None:
            assert group.group_epoch == 0
            return
        assert (reloaded.group_epoch, reloaded.assignment_epoch) == (group.group_epoch, group.assignment_epoch)
        assert reloaded.members == group.members
        assert reloaded.target == group.target and reloaded.owners == group.owners
        assert reloaded.subscription_metadata == group.subscription_metadata


ConsumerGroupModel.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_consumer_group_model = ConsumerGroupModel.TestCase
