"""A partition's log bounds (log start, log end) as its *current* leader sees them, over quorum.wire.

Why ask ourselves: an OFFSET_OUT_OF_RANGE answer proves nothing about the log when the broker
that gave it was named leader by stale metadata (KAFKA-6262). Before a consumer resets, it needs
the bounds from the broker that leads the partition now. So:

- the leader comes from the metadata client, refreshed until current (KIP-232: never older than
  its cache, nor than a committed position's epochs, the floor a caller passes);
- ListOffsets (v4, Kafka 2.1+) is sent with CurrentLeaderEpoch set to the leader epoch of that
  metadata, so a broker no longer leading in that epoch answers FENCED_LEADER_EPOCH (or
  NOT_LEADER_OR_FOLLOWER, or UNKNOWN_LEADER_EPOCH when it is behind) instead of its own bounds,
  and we refresh and ask again after a backoff;
- timestamp -2 (earliest) gives the log start, then -1 (latest) the end a consumer may read to:
  the high watermark, or the last stable offset for read_committed. Earliest is asked first, so
  that retention running between the two requests can only widen the range, never invert it.
  Both go to the same leader in the same epoch (the broker fences each one).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from client_epochs.connection import BrokerConnection, BrokerError, ConnectionPool
from client_epochs.epoch_cache import EpochSource
from client_epochs.metadata_client import MetadataClient, MetadataUnavailableError, StaleMetadataError
from client_epochs.model import TopicPartition
from quorum.wire.errors import ErrorCode, error_name
from quorum.wire.protocol import APIS

log = logging.getLogger(__name__)

LIST_OFFSETS = APIS[2]
LIST_OFFSETS_VERSION = 4
"""The first version with CurrentLeaderEpoch (KIP-320); served by Apache Kafka 2.1+ and this project."""
EARLIEST, LATEST = -2, -1
CONSUMER = -1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1

_RETRIABLE = frozenset(
    {
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.REQUEST_TIMED_OUT,
    }
)
"""What Kafka clients retry after a metadata refresh: leadership moved or is moving, or the broker lags."""
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class LogBounds:
    """[log_start, log_end] of `partition` as broker `leader_id` (at `broker`, "host:port") gave it,
    leading in `leader_epoch`; `named_by` is the broker whose metadata, accepted as current, named it."""

    partition: TopicPartition
    log_start: int
    log_end: int
    leader_id: int
    leader_epoch: int
    broker: str
    named_by: str = ""

    @property
    def leader(self) -> str:
        return f"leader {self.leader_id} ({self.broker}, leader epoch {self.leader_epoch})"


class BoundsSource(Protocol):
    """What EpochGuard asks for bounds: LogBoundsClient, or a fake in tests."""

    def fetch(self, tp: TopicPartition, floor: EpochSource | None = None, timeout: float = 30.0) -> LogBounds: ...

    def close(self) -> None: ...


class LogBoundsError(BrokerError):
    """The leader answered ListOffsets with an error code that asking again will not cure."""

    def __init__(self, address: str, tp: TopicPartition, what: str, code: int) -> None:
        super().__init__(address, f"ListOffsets ({what}) of {tp} answered {error_name(code)} ({code})")
        self.partition = tp
        self.code = code


class LogBoundsUnavailableError(TimeoutError):
    """No current leader gave the bounds of `partition` before the deadline; `cause` is the last reason."""

    def __init__(self, tp: TopicPartition, attempts: int, cause: BaseException | str) -> None:
        super().__init__(f"log bounds of {tp} not known after {attempts} attempt(s): {cause}")
        self.partition = tp
        self.attempts = attempts
        self.cause = cause


class _Retry(Exception):
    """One attempt failed in a way the next attempt, after a metadata refresh, may not."""


class LogBoundsClient:
    """Asks current leaders for log bounds; keeps one connection per broker until close()."""

    def __init__(
        self,
        metadata: MetadataClient,
        *,
        isolation_level: int = READ_UNCOMMITTED,
        request_timeout_s: float = 30.0,
        backoff_s: float = 0.1,
        backoff_max_s: float = 1.0,
    ) -> None:
        self.metadata = metadata
        self.isolation_level = isolation_level
        self._request_timeout_s = request_timeout_s
        self._backoff_s = backoff_s
        self._backoff_max_s = backoff_max_s
        self._connections = ConnectionPool(security=getattr(metadata, "security", None))
        self.retries = 0
        """Attempts that had to be made again (fenced, moved or unreachable leader), for tests and logs."""

    def close(self) -> None:
        self._connections.close()

    def fetch(self, tp: TopicPartition, floor: EpochSource | None = None, timeout: float = 30.0) -> LogBounds:
        """The bounds of `tp` from its current leader, retried with backoff until `timeout`.

        `floor`: epochs the metadata must be at least as new as (a committed position's).
        LogBoundsError for an answer that will not change; LogBoundsUnavailableError at the deadline.
        """
        return self._retrying(tp, floor, timeout, self._fetch_once)

    def offset_for_timestamp(
        self, tp: TopicPartition, timestamp: int, floor: EpochSource | None = None, timeout: float = 30.0
    ) -> int:
        """The first offset of `tp` whose record has a timestamp at or after `timestamp` (ms), from its
        current leader under metadata no older than `floor`, or -1 when no record has (Kafka's answer);
        retried and failed as `fetch`. Served from the remote tier too where the leader tiers the partition."""

        def once(tp: TopicPartition, floors: Mapping[TopicPartition, EpochSource], deadline: float) -> int:
            connection, leader_id, leader_epoch, _ = self._leader(tp, floors, deadline)
            request_deadline = min(deadline, time.monotonic() + self._request_timeout_s)
            return self._list(connection, tp, timestamp, leader_epoch, leader_id, request_deadline, none_ok=True)

        return self._retrying(tp, floor, timeout, once)

    def _retrying(
        self,
        tp: TopicPartition,
        floor: EpochSource | None,
        timeout: float,
        once: Callable[[TopicPartition, Mapping[TopicPartition, EpochSource], float], _T],
    ) -> _T:
        """`once` until it answers, with a doubling backoff between attempts until `timeout`."""
        deadline = time.monotonic() + timeout
        floors: Mapping[TopicPartition, EpochSource] = {tp: floor} if floor is not None else {}
        backoff = self._backoff_s
        attempts = 0
        while True:
            attempts += 1
            try:
                return once(tp, floors, deadline)
            except (_Retry, BrokerError, StaleMetadataError, MetadataUnavailableError) as exc:
                if isinstance(exc, LogBoundsError):
                    raise
                cause: BaseException = exc
            pause = min(backoff * random.uniform(0.8, 1.2), deadline - time.monotonic())
            if pause <= 0:
                raise LogBoundsUnavailableError(tp, attempts, cause)
            self.retries += 1
            log.info("log bounds of %s: %s; asking again in %.2f s", tp, cause, pause)
            time.sleep(pause)
            backoff = min(backoff * 2, self._backoff_max_s)

    def _fetch_once(
        self, tp: TopicPartition, floors: Mapping[TopicPartition, EpochSource], deadline: float
    ) -> LogBounds:
        connection, leader_id, leader_epoch, named_by = self._leader(tp, floors, deadline)
        request_deadline = min(deadline, time.monotonic() + self._request_timeout_s)
        log_start = self._list(connection, tp, EARLIEST, leader_epoch, leader_id, request_deadline)
        log_end = self._list(connection, tp, LATEST, leader_epoch, leader_id, request_deadline)
        return LogBounds(tp, log_start, log_end, leader_id, leader_epoch, connection.address, named_by)

    def _leader(
        self, tp: TopicPartition, floors: Mapping[TopicPartition, EpochSource], deadline: float
    ) -> tuple[BrokerConnection, int, int, str]:
        """A connection to `tp`'s leader, its id and leader epoch, and the broker whose current metadata named it."""
        current = self.metadata.refresh_until_current(
            [tp.topic], floors=floors, timeout=max(deadline - time.monotonic(), 0.0)
        )
        meta = current.partitions.get(tp)
        if meta is None:
            error = current.topic_errors.get(tp.topic)
            detail = f"error {error_name(error)}" if error is not None else "no such partition"
            raise _Retry(f"metadata from {current.answered_by} has {detail} for {tp}")
        broker = current.brokers.get(meta.leader_id)
        if meta.leader_id < 0 or broker is None:
            raise _Retry(
                f"metadata from {current.answered_by} names no reachable leader for {tp} (leader {meta.leader_id})"
            )
        return self._connections.get((broker.host, broker.port)), meta.leader_id, meta.leader_epoch, current.answered_by

    def _list(
        self,
        connection: BrokerConnection,
        tp: TopicPartition,
        timestamp: int,
        leader_epoch: int,
        leader_id: int,
        deadline: float,
        none_ok: bool = False,
    ) -> int:
        """ListOffsets of one partition at the leader, fenced by `leader_epoch`. `none_ok`: a timestamp
        lookup, where offset -1 is an answer (no record that late), not a log without bounds yet."""
        schema = LIST_OFFSETS.request
        partition = schema.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=tp.partition, current_leader_epoch=leader_epoch, timestamp=timestamp
        )
        body = schema(
            replica_id=CONSUMER,
            isolation_level=self.isolation_level,
            topics=[schema.ListOffsetsTopic(name=tp.topic, partitions=[partition])],
        )
        response = connection.request(LIST_OFFSETS, LIST_OFFSETS_VERSION, body, deadline)
        what = {EARLIEST: "earliest", LATEST: "latest"}.get(timestamp, f"timestamp {timestamp}")
        answer = next(
            (
                p
                for t in response.topics
                if t.name == tp.topic
                for p in t.partitions
                if p.partition_index == tp.partition
            ),
            None,
        )
        if answer is None:
            raise BrokerError(connection.address, f"ListOffsets ({what}) answer lacks {tp}")
        if answer.error_code in _RETRIABLE:
            raise _Retry(
                f"broker {leader_id} ({connection.address}) answered ListOffsets ({what}) with "
                f"{error_name(answer.error_code)} for leader epoch {leader_epoch}"
            )
        if answer.error_code:
            raise LogBoundsError(connection.address, tp, what, answer.error_code)
        if answer.offset < 0 and not none_ok:
            raise _Retry(f"broker {leader_id} ({connection.address}) has no {what} offset for {tp} yet")
        return answer.offset if answer.offset >= 0 else -1
