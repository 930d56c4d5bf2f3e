"""Fetch Metadata with its epochs from a cluster's brokers, and refresh until it is not outdated.

confluent-kafka exposes neither leader epochs nor topic epochs, and kafka-python drops the
KIP-232 tag it does not know, so the SDK asks the brokers itself, through the project's one wire
layer (quorum.wire). Each connection opens with ApiVersions to pick the newest Metadata version
both sides speak: v9+ carries the topic epoch (tag 10232), v10+ topic ids, v7+ leader epochs.

`refresh_until_current()` is KIP-232's client refresh: a response older than the client's cache
(or than the epochs its positions were committed under) is refused, counted and asked again, from
the next broker, after a backoff, because the broker that answered may stay stale for a while.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterable, Mapping
from typing import Any

from client_epochs.connection import (
    BrokerAuthenticationError,
    BrokerConnection,
    BrokerError,
    BrokerProtocolError,
    ConnectionPool,
    parse_bootstrap,
)
from client_epochs.epoch_cache import EpochCache, EpochSource, Interest, Verdict
from client_epochs.model import (
    NO_EPOCH,
    ZERO_UUID,
    BrokerMetadata,
    ClusterMetadata,
    PartitionMetadata,
    TopicPartition,
)
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import API_VERSIONS_KEY, APIS
from quorum.wire.sasl_client import ClientSecurity

log = logging.getLogger(__name__)

METADATA = APIS[3]
API_VERSIONS = APIS[API_VERSIONS_KEY]
MIN_METADATA_VERSION = 1
"""v0 cannot ask for "no topics" (an empty list means all of them); every Kafka since 0.10.0 has v1."""
API_VERSIONS_VERSION = 3
"""ApiVersions v3 (Kafka 2.4+); an older broker answers v0 with UNSUPPORTED_VERSION and its ranges."""

DEFAULT_REQUEST_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms
DEFAULT_BACKOFF_S = 0.1  # Kafka's retry.backoff.ms
DEFAULT_BACKOFF_MAX_S = 1.0  # Kafka's retry.backoff.max.ms
_JITTER = 0.2  # Kafka's exponential backoff jitter


class MetadataUnavailableError(ConnectionError):
    """No broker answered Metadata; `failures` holds each broker's BrokerError, in the order tried."""

    def __init__(self, failures: list[BrokerError]) -> None:
        detail = "; ".join(str(failure) for failure in failures) or "no broker was tried before the deadline"
        super().__init__(f"no broker answered Metadata: {detail}")
        self.failures = failures


class StaleMetadataError(TimeoutError):
    """Every response until the deadline was outdated (or lacked a committed partition).

    `verdict` is the last one and `broker` who sent it; `refusals` counts the refused responses.
    """

    def __init__(self, verdict: Verdict, broker: str, refusals: int) -> None:
        super().__init__(f"metadata still not current after {refusals} refused response(s); last from broker "
                         f"{broker}: {verdict.describe()}")
        self.verdict = verdict
        self.broker = broker
        self.refusals = refusals


class MetadataClient:
    """Metadata from a cluster, with each partition's leader, leader_epoch, topic_id and topic_epoch.

    Synchronous and not thread-safe: one client per consumer or replicator loop. It keeps one
    connection per broker it used, and an EpochCache (`cache`) of the views it accepted.
    """

    def __init__(self, bootstrap: str, *, client_id: str = "client-epochs",
                 request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S, backoff_s: float = DEFAULT_BACKOFF_S,
                 backoff_max_s: float = DEFAULT_BACKOFF_MAX_S, cache: EpochCache | None = None,
                 security: ClientSecurity | None = None) -> None:
        """`security`: TLS and SASL for a secured cluster, from the user's client settings
        (`ClientSecurity.of_client_properties` / `of_kafka_python`); every connection of this client
        and of the log-bounds client made over it uses it."""
        self.security = security
        self._addresses: list[tuple[str, int]] = parse_bootstrap(bootstrap)
        self._request_timeout_s = request_timeout_s
        self._backoff_s = backoff_s
        self._backoff_max_s = backoff_max_s
        self._connections = ConnectionPool(client_id, security)
        self._cursor = 0
        self.cache = cache if cache is not None else EpochCache()
        self.refusals = 0
        """Responses refused as outdated so far ("stale metadata refused")."""
        self.last_refusal: tuple[str, Verdict] | None = None
        """The broker and verdict of the latest refused response."""

    def __enter__(self) -> MetadataClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._connections.close()

    @property
    def brokers(self) -> list[str]:
        """The addresses this client rotates over: the bootstrap list, then brokers responses named."""
        return [f"{host}:{port}" for host, port in self._addresses]

    def fetch(self, topics: Iterable[str] | None = None, timeout: float | None = None) -> ClusterMetadata:
        """One Metadata response for `topics` (None: all topics), from the first broker that answers.

        Brokers are tried in turn from the one that answered last; MetadataUnavailableError when
        none answers within `timeout` (default: one request timeout per broker). Never creates topics.
        """
        wanted = None if topics is None else sorted(set(topics))
        deadline = self._deadline(timeout)
        failures: list[BrokerError] = []
        for _ in range(len(self._addresses)):
            if time.monotonic() >= deadline:
                break
            metadata = self._answer_of(self._addresses[self._cursor], wanted, deadline, failures)
            if metadata is not None:
                return metadata
            self._advance()
        raise MetadataUnavailableError(failures)

    def fetch_from_each(self, topics: Iterable[str], timeout: float | None = None) -> list[ClusterMetadata]:
        """One Metadata response for `topics` from each broker: the bootstrap ones, then those the answers
        list, each asked once; a broker that fails is skipped. For a caller that must not act on one
        broker's outdated view (a topic it has not learnt yet, partitions it has not seen added) and so
        compares them all. MetadataUnavailableError when none answers within `timeout`."""
        wanted = sorted(set(topics))
        deadline = self._deadline(timeout)
        answers: list[ClusterMetadata] = []
        failures: list[BrokerError] = []
        for address in self._addresses:  # grows as answers name brokers: those are asked too
            if time.monotonic() >= deadline:
                break
            metadata = self._answer_of(address, wanted, deadline, failures)
            if metadata is not None:
                answers.append(metadata)
        if not answers:
            raise MetadataUnavailableError(failures)
        return answers

    def _deadline(self, timeout: float | None) -> float:
        """`timeout` from now; by default one request timeout per broker known."""
        return time.monotonic() + (timeout if timeout is not None else self._request_timeout_s * len(self._addresses))

    def _answer_of(self, address: tuple[str, int], wanted: list[str] | None, deadline: float,
                   failures: list[BrokerError]) -> ClusterMetadata | None:
        """`address`'s Metadata answer, its brokers learnt; None (and its error in `failures`) if it failed."""
        try:
            metadata = self._fetch_from(address, wanted, deadline)
        except BrokerError as exc:
            log.debug("Metadata from %s failed: %s", exc.address, exc.reason)
            failures.append(exc)
            return None
        self._learn_brokers(metadata)
        return metadata

    def refresh_until_current(self, topics: Iterable[str], floors: Mapping[TopicPartition, EpochSource] | None = None,
                              timeout: float = DEFAULT_REQUEST_TIMEOUT_S) -> ClusterMetadata:
        """Metadata for `topics` that is not outdated, merged into `cache` and returned.

        A response is refused (counted in `refusals`, logged, asked again from the next broker after
        an exponential backoff) while it is older than the cache for a partition of `topics`, or
        older than a floor, or lacks a partition that has a floor. `floors` are the epochs positions
        were committed or stored under (OffsetFetch, internal metadata): KIP-232's seek variant.
        StaleMetadataError when the deadline passes with only refusals, MetadataUnavailableError
        when no broker answered at all (at once when every broker refused the SASL login).
        """
        floors = dict(floors or {})
        wanted = sorted(set(topics) | {tp.topic for tp in floors})
        interest = Interest(topics=frozenset(wanted))
        deadline = time.monotonic() + timeout
        backoff = self._backoff_s
        last_stale: tuple[str, Verdict] | None = None
        last_failure: MetadataUnavailableError | None = None
        refused_here = 0
        while True:
            try:
                metadata = self.fetch(wanted, timeout=max(deadline - time.monotonic(), 0.0))
            except MetadataUnavailableError as exc:
                if exc.failures or last_failure is None:  # keep what the brokers said over a bare deadline
                    last_failure = exc
                if exc.failures and all(isinstance(f, BrokerAuthenticationError) for f in exc.failures):
                    raise  # every broker refused the login: asking again until the deadline cannot help
            else:
                verdict = self._judge(metadata, interest, floors)
                if verdict.current:
                    self._accept(metadata, interest)
                    return metadata
                refused_here += 1
                self._refuse(metadata.answered_by, verdict)
                last_stale = (metadata.answered_by, verdict)
                self._advance()
            pause = min(backoff * random.uniform(1 - _JITTER, 1 + _JITTER), deadline - time.monotonic())
            if pause <= 0:
                break
            time.sleep(pause)
            backoff = min(backoff * 2, self._backoff_max_s)
        if last_stale is not None:
            raise StaleMetadataError(last_stale[1], last_stale[0], refused_here)
        raise last_failure if last_failure is not None else MetadataUnavailableError([])

    def _judge(self, metadata: ClusterMetadata, interest: Interest,
               floors: Mapping[TopicPartition, EpochSource]) -> Verdict:
        """Against the cache (outdated partitions refuse) and the floors (outdated or missing refuse)."""
        cached = self.cache.check(metadata.partitions, metadata.answered_by, interest)
        floored = self.cache.check_floors(metadata.partitions, floors, metadata.answered_by)
        return Verdict(cached.outdated + floored.outdated, floored.missing)

    def _accept(self, metadata: ClusterMetadata, interest: Interest) -> None:
        self.cache.offer(metadata.partitions, metadata.answered_by, interest)

    def _refuse(self, broker: str, verdict: Verdict) -> None:
        self.refusals += 1
        self.last_refusal = (broker, verdict)
        log.info("refused stale metadata from broker %s: %s", broker, verdict.describe())

    def rotate(self) -> None:
        """Ask the next broker first from now on. A Kafka client asks its least loaded broker, not always
        the same one; a caller that plans repeatedly (the Spark source's driver) rotates so that every
        broker, a stale one too, is asked in turn and the cache decides what is accepted."""
        self._advance()

    def _advance(self) -> None:
        self._cursor = (self._cursor + 1) % len(self._addresses)

    def _learn_brokers(self, metadata: ClusterMetadata) -> None:
        """Add the brokers a response lists to the rotation, after the bootstrap ones (as Kafka clients
        move from the bootstrap list to the cluster's brokers), so a stale or dead broker can be avoided."""
        for broker in metadata.brokers.values():
            address = (broker.host, broker.port)
            if address not in self._addresses:
                self._addresses.append(address)

    def _fetch_from(self, address: tuple[str, int], topics: list[str] | None, deadline: float) -> ClusterMetadata:
        connection = self._connections.get(address)
        request_deadline = min(deadline, time.monotonic() + self._request_timeout_s)
        version = self._metadata_version(connection, request_deadline)
        response = connection.request(METADATA, version, _metadata_request(topics, version), request_deadline)
        error = getattr(response, "error_code", ErrorCode.NONE)
        if error:
            raise BrokerError(connection.address, f"Metadata v{version} answered error code {error}")
        return _cluster_metadata(connection.address, version, response)

    def _metadata_version(self, connection: BrokerConnection, deadline: float) -> int:
        """The Metadata version for this connection: ApiVersions once, when it opens."""
        version = connection.state.get("metadata_version") if connection.is_open else None
        if version is not None:
            return version
        ranges = _api_versions(connection, deadline)
        if METADATA.key not in ranges:
            connection.close()
            raise BrokerError(connection.address, "does not serve Metadata (not in its ApiVersions)")
        low, high = ranges[METADATA.key]
        version = min(high, METADATA.max_version)
        if version < max(low, MIN_METADATA_VERSION):
            connection.close()
            raise BrokerError(connection.address, f"serves Metadata v{low}-v{high}; this client needs "
                                                  f"v{MIN_METADATA_VERSION}-v{METADATA.max_version}")
        connection.state["metadata_version"] = version
        return version


def _api_versions(connection: BrokerConnection, deadline: float) -> dict[int, tuple[int, int]]:
    """The broker's version ranges by API key. A broker older than our ApiVersions request answers
    a v0 body (UNSUPPORTED_VERSION, with its ranges), which decodes at v3 only by luck, so an
    unreadable or refused answer is asked again at v0."""
    body = API_VERSIONS.request(client_software_name="client-epochs", client_software_version="1")
    try:
        response = connection.request(API_VERSIONS, API_VERSIONS_VERSION, body, deadline)
    except BrokerProtocolError:
        response = None  # the answer did not decode as v3 (and the connection is closed): ask in v0
    if response is None or response.error_code == ErrorCode.UNSUPPORTED_VERSION:
        response = connection.request(API_VERSIONS, 0, API_VERSIONS.request(), deadline)
    if response.error_code:
        connection.close()
        raise BrokerError(connection.address, f"ApiVersions answered error code {response.error_code}")
    return {entry.api_key: (entry.min_version, entry.max_version) for entry in response.api_keys}


def _metadata_request(topics: list[str] | None, version: int) -> Any:
    schema = METADATA.request
    entries = None
    if topics is not None:
        entries = [schema.MetadataRequestTopic(name=name, topic_id=ZERO_UUID) for name in topics]
    return schema(topics=entries, allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                  include_topic_authorized_operations=False)


def _cluster_metadata(address: str, version: int, response: Any) -> ClusterMetadata:
    """The wire response as the SDK's values; fields a version lacks read as Kafka's defaults."""
    brokers = {b.node_id: BrokerMetadata(b.node_id, b.host, b.port, getattr(b, "rack", None))
               for b in response.brokers}
    partitions: dict[TopicPartition, PartitionMetadata] = {}
    topic_errors: dict[str, int] = {}
    for topic in response.topics:
        if topic.error_code != ErrorCode.NONE or topic.name is None:
            topic_errors[topic.name or str(getattr(topic, "topic_id", ""))] = topic.error_code
            continue
        topic_id = getattr(topic, "topic_id", None) if version >= 10 else None
        topic_id = None if topic_id == ZERO_UUID else topic_id
        topic_epoch = getattr(topic, "topic_epoch", NO_EPOCH) if version >= 9 else NO_EPOCH
        for p in topic.partitions:
            leader_epoch = p.leader_epoch if version >= 7 else NO_EPOCH
            partitions[TopicPartition(topic.name, p.partition_index)] = PartitionMetadata(
                leader_id=p.leader_id, leader_epoch=leader_epoch, topic_id=topic_id,
                topic_epoch=NO_EPOCH if topic_epoch is None else topic_epoch,
                replicas=tuple(p.replica_nodes), isr=tuple(p.isr_nodes), error_code=p.error_code)
    return ClusterMetadata(answered_by=address, version=version, cluster_id=getattr(response, "cluster_id", None),
                           controller_id=getattr(response, "controller_id", -1), brokers=brokers,
                           partitions=partitions, topic_errors=topic_errors)
