"""The driver's half of the `kafka_epochs` Spark source, sans-IO: options, offsets with epochs, and
the rule that decides the end of the next micro-batch.

Spark's own Kafka source keeps bare offsets. When a broker answers with an old leader or an old log
end it retries `fetchOffset.numRetries` times and then plans from what it got, so a batch can go
backwards (rows twice) or be planned from a topic that was deleted and created again (rows lost).
Here every offset carries the epochs it was planned under (KIP-232's internal metadata, per
partition in Spark's checkpoint):

    {"topic": {"0": {"offset": 42, "leader_epoch": 3, "topic_epoch": 7, "topic_id": "<id as Kafka prints it>"}}}

(`topic_id` is optional: checkpoints written without it still parse), and `next_end()` turns a
start (the last planned end) and what the current leaders said into the next end, or into a reason
to ask again (`Backwards`), or into an error. Nothing here opens a socket or reads a clock:
`client_epochs.spark` does the asking, the backoff and the waiting.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from client_epochs.consumer_guard import is_recreated
from client_epochs.errors import TopicRecreatedError
from client_epochs.model import NO_EPOCH, ZERO_UUID, Epochs, TopicPartition
from quorum.wire.internal_metadata import InternalMetadata, InvalidInternalMetadataError, parse_topic_id, topic_id_text
from quorum.wire.sasl_client import sasl_login_of_client_properties

EARLIEST = -2
"""Kafka's "earliest" offset in a start: the partition is read from its log start (a new partition)."""
LATEST = -1
"""Kafka's "latest" offset in startingOffsets/endingOffsets JSON."""

DEFAULT_NUM_RETRIES = 3  # Spark's Kafka source: fetchOffset.numRetries
DEFAULT_RETRY_INTERVAL_MS = 100
"""Spark's fetchOffset.retryIntervalMs is 10 ms; a leader change takes longer than 30 ms, so the first
backoff here is Kafka's retry.backoff.ms, doubled on each retry."""
DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark's kafkaConsumer.pollTimeoutMs (spark.network.timeout)


class SourceOptionError(ValueError):
    """An option of the `kafka_epochs` source is missing, unknown or malformed; the message names it."""


class OffsetsWentBackwardsError(RuntimeError):
    """The current leader's end offset stayed below an offset already planned, through every retry.

    Planning from it would read records again; the query fails instead, naming the partition and
    both offsets.
    """

    def __init__(self, partition: TopicPartition, planned: int, offered: int, source: str, attempts: int) -> None:
        super().__init__(f"{partition}: the latest offset {offered} from {source} is below the offset {planned} "
                         f"already planned, after {attempts} attempt(s); refusing to plan a batch backwards")
        self.partition = partition
        self.planned = planned
        self.offered = offered


class DataLossError(RuntimeError):
    """Records between a planned offset and the log start are gone (retention) and failOnDataLoss is true."""

    def __init__(self, partition: TopicPartition, planned: int, log_start: int) -> None:
        super().__init__(f"{partition}: offsets {planned} to {log_start - 1} were deleted before they were read "
                         f"(log start {log_start}); set failOnDataLoss=false to skip them")
        self.partition = partition
        self.planned = planned
        self.log_start = log_start


# ---------------------------------------------------------------------------------------------
# Offsets with epochs


@dataclass(frozen=True, slots=True)
class PartitionOffset:
    """A position in a partition and the epochs it was planned under (-1: unknown, nothing checked),
    and the id of the topic it is a position in (None: unknown; how a recreation is told from growth)."""

    offset: int
    leader_epoch: int = NO_EPOCH
    topic_epoch: int = NO_EPOCH
    topic_id: uuid.UUID | None = None

    def __post_init__(self) -> None:
        if self.topic_id == ZERO_UUID:  # Kafka's "no topic id"
            object.__setattr__(self, "topic_id", None)

    @property
    def epochs(self) -> Epochs:
        return Epochs(self.topic_epoch, self.leader_epoch, self.topic_id)

    @property
    def floor(self) -> InternalMetadata:
        """The KIP-232 floor metadata must not be older than (internal metadata, as with a seek)."""
        return InternalMetadata(self.topic_epoch, self.leader_epoch, self.topic_id)

    def to_json(self) -> dict[str, int | str]:
        out: dict[str, int | str] = {"offset": self.offset, "leader_epoch": self.leader_epoch,
                                     "topic_epoch": self.topic_epoch}
        if self.topic_id is not None:
            out["topic_id"] = topic_id_text(self.topic_id)
        return out

    def same_topic(self, later: PartitionOffset) -> bool:
        """Whether `later` is a position in the same topic as this one, not in one created again under
        its name (consumer_guard's rule: the ids where both have one, else the evidence of the epochs).
        A higher topic epoch alone is not a recreation: CreatePartitions raises it too."""
        return not is_recreated(self.floor, later.epochs)


Offsets = dict[TopicPartition, PartitionOffset]


def offsets_to_json(offsets: Mapping[TopicPartition, PartitionOffset]) -> dict[str, dict[str, dict[str, int | str]]]:
    """Spark's checkpoint form: topic -> partition (as a string, JSON keys) -> offset with epochs."""
    out: dict[str, dict[str, dict[str, int | str]]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp].to_json()
    return out


def offsets_from_json(value: object, what: str = "offsets") -> Offsets:
    """Parse `{"topic": {"0": 42 | {"offset": 42, "leader_epoch": 3, "topic_epoch": 7, "topic_id": "..."}}}`
    (a str or a dict; every key but offset optional).

    A bare number is an offset without epochs (Spark's Kafka source's form); -2 is earliest, -1 latest.
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise SourceOptionError(f"{what} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise SourceOptionError(f"{what} must map topics to partitions, got {value!r}")
    offsets: Offsets = {}
    for topic, partitions in value.items():
        if not isinstance(partitions, dict):
            raise SourceOptionError(f"{what}: topic {topic!r} must map partitions to offsets, got {partitions!r}")
        for key, entry in partitions.items():
            try:
                tp = TopicPartition(topic, int(key))
            except ValueError:
                raise SourceOptionError(f"{what}: {topic!r} partition {key!r} is not a number") from None
            offsets[tp] = _partition_offset(entry, f"{what} of {tp}")
    return offsets


def _partition_offset(entry: object, what: str) -> PartitionOffset:
    if isinstance(entry, bool):
        raise SourceOptionError(f"{what} must be a number or an object, got {entry!r}")
    if isinstance(entry, int):
        return PartitionOffset(entry)
    if not isinstance(entry, dict) or not isinstance(entry.get("offset"), int):
        raise SourceOptionError(f"{what} must be a number or {{\"offset\": N, ...}}, got {entry!r}")
    unknown = set(entry) - {"offset", "leader_epoch", "topic_epoch", "topic_id"}
    if unknown:
        raise SourceOptionError(f"{what} has unknown field(s) {sorted(unknown)}")
    epochs = [entry.get(name, NO_EPOCH) for name in ("leader_epoch", "topic_epoch")]
    if not all(isinstance(epoch, int) and not isinstance(epoch, bool) for epoch in epochs):
        raise SourceOptionError(f"{what}: epochs must be integers, got {entry!r}")
    topic_id = None
    if entry.get("topic_id") is not None:
        try:
            topic_id = parse_topic_id(entry["topic_id"])
        except InvalidInternalMetadataError as exc:
            raise SourceOptionError(f"{what}: {exc}") from None
    return PartitionOffset(entry["offset"], *epochs, topic_id)


# ---------------------------------------------------------------------------------------------
# Options


ON_RECREATED = ("fail", "earliest")
_SUBSCRIPTIONS = ("subscribe", "subscribePattern", "assign")
_KNOWN = {*_SUBSCRIPTIONS, "startingOffsets", "endingOffsets", "maxOffsetsPerTrigger", "failOnDataLoss",
          "includeHeaders", "onTopicRecreated", "commitOffsetsToGroup", "fetchOffset.numRetries",
          "fetchOffset.retryIntervalMs", "kafkaConsumer.pollTimeoutMs", "path"}


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The source's options, with the names of Spark's Kafka source where they mean the same.

    `onTopicRecreated` (fail | earliest) and `commitOffsetsToGroup` (a group id) are this source's own.
    `client` holds the `kafka.*` options without their prefix, passed to the clients.
    """

    bootstrap: str
    client: Mapping[str, str]
    topics: tuple[str, ...] = ()
    pattern: re.Pattern[str] | None = None
    assigned: tuple[TopicPartition, ...] = ()
    starting: str | Offsets = "latest"
    ending: str | Offsets = "latest"
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    on_topic_recreated: str = "fail"
    commit_group: str | None = None
    num_retries: int = DEFAULT_NUM_RETRIES
    retry_interval_ms: int = DEFAULT_RETRY_INTERVAL_MS
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS

    def wants(self, topic: str) -> bool:
        """Whether a topic the cluster lists belongs to this subscription."""
        if self.pattern is not None:
            return self.pattern.fullmatch(topic) is not None
        return topic in self.topics or any(tp.topic == topic for tp in self.assigned)


def parse_options(options: Mapping[str, str], *, streaming: bool = True) -> SourceOptions:
    """Check and convert the options a user passed to `.option()`; SourceOptionError names the bad one.

    Spark lower-cases nothing here (Python data sources get a case-insensitive map), so names are
    matched without regard to case, as Spark's Kafka source does.
    """
    by_lower = {key.lower(): (key, value) for key, value in options.items()}

    def get(name: str) -> str | None:
        found = by_lower.get(name.lower())
        return None if found is None else found[1]

    client = {key[len("kafka."):]: value for key, value in options.items() if key.lower().startswith("kafka.")}
    bootstrap = client.pop("bootstrap.servers", None)
    if not bootstrap:
        raise SourceOptionError("option kafka.bootstrap.servers is required (host:port,...)")
    try:  # the driver's own connections take these: what they cannot use is refused now, not at the first batch
        sasl_login_of_client_properties(client)
    except ValueError as exc:
        raise SourceOptionError(f"option kafka.{exc}") from None
    unknown = sorted(key for key, _ in by_lower.values()
                     if not key.lower().startswith("kafka.") and key.lower() not in {k.lower() for k in _KNOWN})
    if unknown:
        raise SourceOptionError(f"unknown option(s) {unknown}; known: {sorted(_KNOWN)} and kafka.*")
    given = [name for name in _SUBSCRIPTIONS if get(name) is not None]
    if len(given) != 1:
        raise SourceOptionError("exactly one of subscribe, subscribePattern, assign is required, "
                                f"got {given or 'none'}")
    topics: tuple[str, ...] = ()
    pattern = None
    assigned: tuple[TopicPartition, ...] = ()
    if given[0] == "subscribe":
        topics = tuple(sorted({t.strip() for t in (get("subscribe") or "").split(",") if t.strip()}))
        if not topics:
            raise SourceOptionError("option subscribe names no topic")
    elif given[0] == "subscribePattern":
        try:
            pattern = re.compile(get("subscribePattern") or "")
        except re.error as exc:
            raise SourceOptionError(f"option subscribePattern is not a regular expression: {exc}") from None
    else:
        assigned = _assignment(get("assign") or "")
    starting = _offsets_option("startingOffsets", get("startingOffsets"), "earliest" if not streaming else "latest")
    ending = _offsets_option("endingOffsets", get("endingOffsets"), "latest")
    if streaming and get("endingOffsets") is not None:
        raise SourceOptionError("option endingOffsets is for batch reads only (spark.read), not spark.readStream")
    if ending == "earliest":
        raise SourceOptionError("option endingOffsets cannot be earliest")
    if starting == "latest" and not streaming:
        raise SourceOptionError("option startingOffsets cannot be latest for a batch read")
    recreated = (get("onTopicRecreated") or "fail").lower()
    if recreated not in ON_RECREATED:
        raise SourceOptionError(f"option onTopicRecreated must be one of {ON_RECREATED}, got {recreated!r}")
    return SourceOptions(
        bootstrap=bootstrap, client=client, topics=topics, pattern=pattern, assigned=assigned,
        starting=starting, ending=ending,
        max_offsets_per_trigger=_positive("maxOffsetsPerTrigger", get("maxOffsetsPerTrigger")),
        fail_on_data_loss=_boolean("failOnDataLoss", get("failOnDataLoss"), True),
        include_headers=_boolean("includeHeaders", get("includeHeaders"), False),
        on_topic_recreated=recreated, commit_group=get("commitOffsetsToGroup") or None,
        num_retries=_positive("fetchOffset.numRetries", get("fetchOffset.numRetries"), zero=True)
        if get("fetchOffset.numRetries") is not None else DEFAULT_NUM_RETRIES,
        retry_interval_ms=_positive("fetchOffset.retryIntervalMs", get("fetchOffset.retryIntervalMs"))
        or DEFAULT_RETRY_INTERVAL_MS,
        poll_timeout_ms=_positive("kafkaConsumer.pollTimeoutMs", get("kafkaConsumer.pollTimeoutMs"))
        or DEFAULT_POLL_TIMEOUT_MS)


def _assignment(text: str) -> tuple[TopicPartition, ...]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SourceOptionError(f"option assign is not JSON ({{\"topic\": [0, 1]}}): {exc}") from None
    if not isinstance(value, dict) or not value:
        raise SourceOptionError(f"option assign must map topics to partition lists, got {text!r}")
    out = []
    for topic, partitions in value.items():
        if not isinstance(partitions, list) or not all(isinstance(p, int) and p >= 0 for p in partitions):
            raise SourceOptionError(f"option assign: topic {topic!r} needs a list of partition numbers")
        out += [TopicPartition(topic, p) for p in partitions]
    return tuple(sorted(set(out)))


def _offsets_option(name: str, text: str | None, default: str) -> str | Offsets:
    if text is None:
        return default
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        return word
    return offsets_from_json(text, f"option {name}")


def _positive(name: str, text: str | None, zero: bool = False) -> int | None:
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise SourceOptionError(f"option {name} must be an integer, got {text!r}") from None
    if value < 0 or (value == 0 and not zero):
        raise SourceOptionError(f"option {name} must be {'at least 0' if zero else 'positive'}, got {value}")
    return value


def _boolean(name: str, text: str | None, default: bool) -> bool:
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise SourceOptionError(f"option {name} must be true or false, got {text!r}")
    return text.strip().lower() == "true"


# ---------------------------------------------------------------------------------------------
# Planning


@dataclass(frozen=True, slots=True)
class Observed:
    """What the current leader said about a partition, under metadata the epoch cache accepted."""

    log_start: int
    log_end: int
    leader_epoch: int
    topic_epoch: int
    source: str = "the leader"
    topic_id: uuid.UUID | None = None
    current_broker: str = ""
    """A broker whose metadata naming this leader was accepted as current ("host:port"): a task reading
    the partition bootstraps its consumer there."""

    def at(self, offset: int) -> PartitionOffset:
        """`offset` in this partition, under the epochs and the topic id seen."""
        return PartitionOffset(offset, self.leader_epoch, self.topic_epoch, self.topic_id)


@dataclass(frozen=True, slots=True)
class Backwards:
    """The leader's end is below a planned offset for `partition`: ask again, then fail."""

    partition: TopicPartition
    planned: int
    offered: int
    source: str


@dataclass(frozen=True, slots=True)
class Range:
    """One task's work: read [start, end) of `partition` (start EARLIEST: from the log start),
    from a leader at least at `leader_epoch`; rows carry `topic_epoch`."""

    partition: TopicPartition
    start: int
    end: int
    leader_epoch: int
    topic_epoch: int
    bootstrap_from: str = ""
    """A broker whose metadata the driver accepted as current when it planned ("host:port"), where the
    task bootstraps its consumer: librdkafka keeps asking the broker it first reached while it knows no
    leader, and another broker may be the stale one naming a dead or former leader (KAFKA-6262).
    Empty for a batch planned before a restart."""

    def as_observed(self, observed: Mapping[TopicPartition, Observed]) -> Range:
        """This range bootstrapped from the broker whose current metadata the driver last used for it."""
        seen = observed.get(self.partition)
        return replace(self, bootstrap_from=seen.current_broker) if seen is not None else self


def initial_offsets(starting: str | Offsets, observed: Mapping[TopicPartition, Observed]) -> Offsets:
    """The first start: earliest/latest of every observed partition, or the JSON's offsets (-2/-1 in
    it resolved per partition; observed partitions it does not name start at earliest, as Spark's)."""
    out: Offsets = {}
    for tp, seen in sorted(observed.items()):
        if isinstance(starting, str):
            offset = seen.log_start if starting == "earliest" else seen.log_end
            out[tp] = seen.at(offset)
            continue
        given = starting.get(tp)
        if given is None or given.offset == EARLIEST:
            out[tp] = seen.at(seen.log_start)
        elif given.offset == LATEST:
            out[tp] = seen.at(seen.log_end)
        else:
            out[tp] = PartitionOffset(given.offset, given.leader_epoch, given.topic_epoch)
    return out


def next_end(start: Mapping[TopicPartition, PartitionOffset], observed: Mapping[TopicPartition, Observed],
             options: SourceOptions, max_rows: int | None = None) -> Offsets | list[Backwards]:
    """The end of the next batch from `start`, or the partitions whose end went backwards.

    Per partition: a topic id other than the start's means the topic was recreated (without ids on
    both sides, a higher topic epoch with the leader epoch gone back: `PartitionOffset.same_topic`);
    that is TopicRecreatedError, or with onTopicRecreated=earliest an end at the new topic's log start,
    which reads nothing of the old topic. The same topic under a higher topic epoch has grown
    partitions: it is read on from the start, its new partitions from their log start.
    An end below the start is `Backwards`; a log start past
    the start is data loss (DataLossError unless failOnDataLoss is false). A partition new to the
    start is read from its log start. `max_rows` caps the batch (maxOffsetsPerTrigger), shared
    among partitions in proportion to what each has.
    """
    recreated = {tp: (start[tp].floor, seen.at(seen.log_end).epochs) for tp, seen in observed.items()
                 if tp in start and not start[tp].same_topic(seen.at(seen.log_end))}
    if recreated and options.on_topic_recreated == "fail":
        raise TopicRecreatedError(recreated)
    backwards: list[Backwards] = []
    end: Offsets = {}
    available: dict[TopicPartition, tuple[int, int]] = {}
    for tp, seen in sorted(observed.items()):
        here = seen.at(seen.log_end)
        if tp in recreated:
            end[tp] = seen.at(seen.log_start)
            continue
        began = start.get(tp)
        if began is None or began.offset == EARLIEST:
            available[tp] = (seen.log_start, seen.log_end)
        elif seen.log_end < began.offset:
            backwards.append(Backwards(tp, began.offset, seen.log_end, seen.source))
            continue
        else:
            if seen.log_start > began.offset and options.fail_on_data_loss:
                raise DataLossError(tp, began.offset, seen.log_start)
            available[tp] = (max(began.offset, seen.log_start), seen.log_end)
        end[tp] = here
    if backwards:
        return backwards
    for tp, began in start.items():  # a partition no longer observed keeps its place
        end.setdefault(tp, began)
    if max_rows is not None:
        for tp, offset in _capped(available, max_rows).items():
            end[tp] = replace(end[tp], offset=offset)
    return end


def _capped(available: Mapping[TopicPartition, tuple[int, int]], max_rows: int) -> dict[TopicPartition, int]:
    """End offsets that read at most `max_rows` in all, each partition its share (Spark's rateLimit:
    proportional to its backlog, rounded down, at least one record for a partition that has any)."""
    total = sum(max(end - begin, 0) for begin, end in available.values())
    if total <= max_rows:
        return {}
    out, left = {}, max_rows
    for tp, (begin, end) in sorted(available.items()):
        backlog = max(end - begin, 0)
        share = min(backlog, max(1 if backlog else 0, backlog * max_rows // total), left)
        left -= share
        out[tp] = begin + share
    return out


def ranges(start: Mapping[TopicPartition, PartitionOffset],
           end: Mapping[TopicPartition, PartitionOffset]) -> list[Range]:
    """The tasks of a planned batch, from its start and end offsets alone (Spark calls this again
    after a restart, for a batch planned before it): one per partition with records to read.

    A partition absent from `start` is new: it is read from its log start (unless its end is 0:
    nothing was ever written to it). Between a start and an end in different incarnations of the topic
    (a recreated topic followed with onTopicRecreated=earliest: `same_topic`) there is nothing to
    read; an end under a higher topic epoch of the same topic (partitions added) is read as any other.
    An end below its start cannot come from `next_end`; it is refused here too.
    """
    out = []
    for tp, stop in sorted(end.items()):
        began = start.get(tp, PartitionOffset(EARLIEST))
        if began.offset != EARLIEST and not began.same_topic(stop):
            continue
        if began.offset != EARLIEST and stop.offset < began.offset:
            raise OffsetsWentBackwardsError(tp, began.offset, stop.offset, "the checkpoint", 1)
        if stop.offset > max(began.offset, 0):
            out.append(Range(tp, began.offset, stop.offset, stop.leader_epoch, stop.topic_epoch))
    return out


def floors(offsets: Mapping[TopicPartition, PartitionOffset]) -> dict[TopicPartition, InternalMetadata]:
    """The epochs metadata must not be older than for these offsets (KIP-232, positions with epochs)."""
    return {tp: offset.floor for tp, offset in offsets.items() if offset.topic_epoch >= 0 or offset.leader_epoch >= 0}


def partitions_of(options: SourceOptions, listed: Iterable[TopicPartition]) -> list[TopicPartition]:
    """The partitions of the subscription among those the cluster lists (an assignment: exactly its own)."""
    if options.assigned:
        return list(options.assigned)
    return sorted(tp for tp in listed if options.wants(tp.topic))
