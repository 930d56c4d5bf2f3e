"""Committed offsets read with our own OffsetFetch (FindCoordinator, then OffsetFetch) over quorum.wire.

Why not the wrapped client's `committed()`: librdkafka (confluent-kafka 2.16, librdkafka#4649)
reads a committed metadata string it did not write itself past its end, so it comes back with
stray bytes or fails to decode. Internal metadata must be read exactly, so the confluent wrapper
asks the group coordinator itself. FindCoordinator v3 and OffsetFetch v7 (one group, topics by
name) are served by Apache Kafka 2.5+ and by this project's brokers.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from client_epochs.connection import BrokerError, ConnectionPool, parse_bootstrap
from client_epochs.model import NO_EPOCH, TopicPartition
from quorum.wire.errors import ErrorCode, error_name
from quorum.wire.protocol import APIS
from quorum.wire.sasl_client import ClientSecurity

FIND_COORDINATOR, OFFSET_FETCH = APIS[10], APIS[9]
FIND_COORDINATOR_VERSION, OFFSET_FETCH_VERSION = 3, 7
_RETRIABLE = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR,
              ErrorCode.UNSTABLE_OFFSET_COMMIT}
"""UNSTABLE_OFFSET_COMMIT: the group's commit of that partition is appended but not yet replicated
(require_stable, KIP-447; Kafka's consumer retries it too). A group that commits every second hit it
in over half of the soak's samples (issue 19)."""


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """One partition's committed offset as the coordinator stores it; offset -1 when none is committed."""

    offset: int
    leader_epoch: int
    metadata: str | None


class OffsetFetchError(BrokerError):
    """The coordinator answered OffsetFetch or FindCoordinator with a Kafka error code (`code`)."""

    def __init__(self, address: str, what: str, code: int) -> None:
        super().__init__(address, f"{what} answered {error_name(code)} (error code {code})")
        self.code = code


def is_retriable(exc: BrokerError) -> bool:
    """Whether asking again may cure `exc`: the coordinator moving, loading or not there yet, or no
    answer at all (a connection error, a deadline); not an answer such as GROUP_AUTHORIZATION_FAILED."""
    return not isinstance(exc, OffsetFetchError) or exc.code in _RETRIABLE


class OffsetFetcher:
    """Reads a group's committed offsets; connections are kept for the next call and closed by close()."""

    def __init__(self, bootstrap: str, client_id: str = "client-epochs", retry_backoff_s: float = 0.1,
                 security: ClientSecurity | None = None) -> None:
        self._bootstrap = parse_bootstrap(bootstrap)
        self._backoff_s = retry_backoff_s
        self._connections = ConnectionPool(client_id, security)
        self._coordinators: dict[str, tuple[str, int]] = {}

    def close(self) -> None:
        self._connections.close()

    def fetch(self, group: str, partitions: Iterable[TopicPartition], timeout: float = 30.0
              ) -> dict[TopicPartition, CommittedOffset]:
        """The committed offsets of `partitions` for `group`, retrying coordinator moves until `timeout`.

        At the deadline it raises the last failure, except one the deadline itself cut short (a request
        still unanswered): then the cluster's last answer says more (COORDINATOR_NOT_AVAILABLE from
        every try, not "no answer in time" from the one that ran into the deadline on a busy machine).
        """
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        deadline = time.monotonic() + timeout
        answered: OffsetFetchError | None = None
        while True:
            try:
                return self._fetch_once(group, wanted, deadline)
            except BrokerError as exc:
                self._coordinators.pop(group, None)
                retriable = is_retriable(exc)
                if isinstance(exc, OffsetFetchError):
                    answered = exc
                now = time.monotonic()
                if not retriable or now + self._backoff_s >= deadline:
                    if answered is not None and answered is not exc and now >= deadline:
                        raise answered from exc
                    raise
                time.sleep(self._backoff_s)

    def _fetch_once(self, group: str, wanted: list[TopicPartition], deadline: float
                    ) -> dict[TopicPartition, CommittedOffset]:
        connection = self._connections.get(self._coordinator(group, deadline))
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in wanted:
            by_topic[tp.topic].append(tp.partition)
        schema = OFFSET_FETCH.request
        topics = [schema.OffsetFetchRequestTopic(name=topic, partition_indexes=indexes)
                  for topic, indexes in by_topic.items()]
        body = schema(group_id=group, require_stable=True, topics=topics)
        response = connection.request(OFFSET_FETCH, OFFSET_FETCH_VERSION, body, deadline)
        if response.error_code:
            raise OffsetFetchError(connection.address, "OffsetFetch", response.error_code)
        got: dict[TopicPartition, CommittedOffset] = {}
        for topic in response.topics:
            for p in topic.partitions:
                if p.error_code:
                    raise OffsetFetchError(connection.address, f"OffsetFetch of {topic.name}-{p.partition_index}",
                                           p.error_code)
                got[TopicPartition(topic.name, p.partition_index)] = CommittedOffset(
                    p.committed_offset, NO_EPOCH if p.committed_leader_epoch is None else p.committed_leader_epoch,
                    p.metadata)
        return {tp: got.get(tp, CommittedOffset(-1, NO_EPOCH, None)) for tp in wanted}

    def _coordinator(self, group: str, deadline: float) -> tuple[str, int]:
        known = self._coordinators.get(group)
        if known is not None:
            return known
        failures = []
        for address in self._bootstrap:
            connection = self._connections.get(address)
            try:
                response = connection.request(FIND_COORDINATOR, FIND_COORDINATOR_VERSION,
                                              FIND_COORDINATOR.request(key=group, key_type=0), deadline)
            except BrokerError as exc:
                failures.append(exc)
                continue
            if response.error_code:
                raise OffsetFetchError(connection.address, f"FindCoordinator for group {group!r}",
                                       response.error_code)
            self._coordinators[group] = (response.host, response.port)
            return self._coordinators[group]
        raise failures[-1]

