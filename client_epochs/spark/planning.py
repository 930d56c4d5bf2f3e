"""The driver's half of the `kafka_epochs` Spark source, sans-IO: offsets with epochs, the rule that
decides the end of the next micro-batch, and offsets from ListOffsets' answers to timestamps (the
options themselves are checked in `client_epochs.spark.options`).

Spark's own Kafka source keeps bare offsets. When a broker answers with an old leader or an old log
end it retries `fetchOffset.numRetries` times and then plans from what it got, so a batch can go
backwards (rows twice) or be planned from a topic that was deleted and created again (rows lost).
Here every offset carries the epochs it was planned under (KIP-232's internal metadata, per
partition in Spark's checkpoint):

    {"topic": {"0": {"offset": 42, "leader_epoch": 3, "topic_epoch": 7, "topic_id": "<id as Kafka prints it>"}}}

(`topic_id` is optional: checkpoints written without it still parse), and `next_end()` turns a
start (the last planned end) and what the current leaders said into the next end, or into a reason
to ask again (`Backwards`), or into an error. A topic id given by the user in startingOffsets is
kept and checked as one from a checkpoint. Nothing here opens a socket or reads a clock:
`client_epochs.spark` does the asking, the backoff and the waiting.
"""

from __future__ import annotations

import importlib
import json
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from client_epochs.consumer_guard import is_recreated
from client_epochs.errors import TopicRecreatedError
from client_epochs.model import NO_EPOCH, ZERO_UUID, Epochs, TopicPartition
from quorum.wire.internal_metadata import InternalMetadata, InvalidInternalMetadataError, parse_topic_id, topic_id_text

_V = TypeVar("_V")
_IN_OPTIONS = frozenset({"SourceOptions", "parse_options", "ON_RECREATED"})


def __getattr__(name: str) -> Any:
    """The options moved to `client_epochs.spark.options`; their old names here still resolve."""
    if name in _IN_OPTIONS:
        return getattr(importlib.import_module("client_epochs.spark.options"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


EARLIEST = -2
"""Kafka's "earliest" offset in a start: the partition is read from its log start (a new partition)."""
LATEST = -1
"""Kafka's "latest" offset in startingOffsets/endingOffsets JSON."""

DEFAULT_NUM_RETRIES = 3  # Spark's Kafka source: fetchOffset.numRetries
DEFAULT_RETRY_INTERVAL_MS = 100
"""Spark's fetchOffset.retryIntervalMs is 10 ms; a leader change takes longer than 30 ms, so the first
backoff here is Kafka's retry.backoff.ms, doubled on each retry."""
DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark's kafkaConsumer.pollTimeoutMs (spark.network.timeout)


TimeSpec = int | Mapping[TopicPartition, int]
"""A timestamp (ms since the epoch) for every partition (startingTimestamp), or one per partition
(startingOffsetsByTimestamp; -2 and -1 there mean earliest and latest, as in Kafka's ListOffsets)."""


class PlannedOptions(Protocol):
    """What planning reads of the source's options (`client_epochs.spark.options.SourceOptions`): named
    here so that the options module, which parses into planning's types, is not imported back."""

    assigned: tuple[TopicPartition, ...]
    fail_on_data_loss: bool
    on_topic_recreated: str

    def wants(self, topic: str) -> bool: ...


class SourceOptionError(ValueError):
    """An option of the `kafka_epochs` source is missing, unknown or malformed; the message names it."""


class OffsetsWentBackwardsError(RuntimeError):
    """The current leader's end offset stayed below an offset already planned, through every retry.

    Planning from it would read records again; the query fails instead, naming the partition and
    both offsets.
    """

    def __init__(self, partition: TopicPartition, planned: int, offered: int, source: str, attempts: int) -> None:
        super().__init__(
            f"{partition}: the latest offset {offered} from {source} is below the offset {planned} "
            f"already planned, after {attempts} attempt(s); refusing to plan a batch backwards"
        )
        self.partition = partition
        self.planned = planned
        self.offered = offered


class DataLossError(RuntimeError):
    """Records between a planned offset and the log start are gone (retention) and failOnDataLoss is true."""

    def __init__(self, partition: TopicPartition, planned: int, log_start: int) -> None:
        super().__init__(
            f"{partition}: offsets {planned} to {log_start - 1} were deleted before they were read "
            f"(log start {log_start}); set failOnDataLoss=false to skip them"
        )
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
        out: dict[str, int | str] = {
            "offset": self.offset,
            "leader_epoch": self.leader_epoch,
            "topic_epoch": self.topic_epoch,
        }
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
    return per_partition(value, what, "offsets", _partition_offset)


def per_partition(
    value: object, what: str, kind: str, convert: Callable[[object, str], _V]
) -> dict[TopicPartition, _V]:
    """`{"topic": {"0": entry, ...}}` (JSON text or its dict) as `convert(entry, "<what> of <topic-partition>")`
    per partition: Spark's per-partition option form (offsets, timestamps). SourceOptionError names what
    is wrong, with `kind` (what the partitions map to) in the message."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise SourceOptionError(f'{what} is not JSON ({{"topic": {{"0": ...}}}}): {exc}') from None
    if not isinstance(value, dict):
        raise SourceOptionError(f"{what} must map topics to partitions, got {value!r}")
    out: dict[TopicPartition, _V] = {}
    for topic, partitions in value.items():
        if not isinstance(partitions, dict):
            raise SourceOptionError(f"{what}: topic {topic!r} must map partitions to {kind}, got {partitions!r}")
        for key, entry in partitions.items():
            try:
                tp = TopicPartition(topic, int(key))
            except ValueError:
                raise SourceOptionError(f"{what}: {topic!r} partition {key!r} is not a number") from None
            out[tp] = convert(entry, f"{what} of {tp}")
    return out


def _partition_offset(entry: object, what: str) -> PartitionOffset:
    if isinstance(entry, bool):
        raise SourceOptionError(f"{what} must be a number or an object, got {entry!r}")
    if isinstance(entry, int):
        return PartitionOffset(entry)
    if not isinstance(entry, dict) or not isinstance(entry.get("offset"), int):
        raise SourceOptionError(f'{what} must be a number or {{"offset": N, ...}}, got {entry!r}')
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
        else:  # the user's epochs and topic id are kept: the first plan checks them as any start's
            out[tp] = given
    return out


def recreated_since(start: Offsets, observed: Mapping[TopicPartition, Observed], on_recreated: str) -> Offsets:
    """`start`, checked against what the leaders say now (a batch read's one plan; a stream's first
    `next_end` does the same): a partition of a topic created again since the start was written (a
    user-given topic id that is not the topic's now, `PartitionOffset.same_topic`) is TopicRecreatedError,
    or with onTopicRecreated=earliest starts at the new topic's log start."""
    recreated = {
        tp: (given.floor, observed[tp].at(observed[tp].log_end).epochs)
        for tp, given in start.items()
        if tp in observed and given.offset >= 0 and not given.same_topic(observed[tp].at(given.offset))
    }
    if recreated and on_recreated == "fail":
        raise TopicRecreatedError(recreated)
    return {tp: observed[tp].at(observed[tp].log_start) if tp in recreated else given for tp, given in start.items()}


NO_OFFSET = -1
"""ListOffsets' offset for a timestamp no record reaches (every record is older)."""


def timestamps_to_ask(spec: TimeSpec, partitions: Iterable[TopicPartition], what: str) -> dict[TopicPartition, int]:
    """The timestamp to ask each partition's leader for: one for all (startingTimestamp, endingTimestamp),
    or the JSON's, which must name exactly the subscription's partitions (Spark's rule: a partition left
    out would have no place to start or end)."""
    wanted = sorted(set(partitions))
    if isinstance(spec, int):
        return dict.fromkeys(wanted, spec)
    missing, extra = sorted(set(wanted) - set(spec)), sorted(set(spec) - set(wanted))
    if missing or extra:
        raise SourceOptionError(
            f"option {what} must name every partition of the subscription and no other: "
            f"missing {[str(tp) for tp in missing]}, not subscribed {[str(tp) for tp in extra]}"
        )
    return {tp: spec[tp] for tp in wanted}


def offsets_at_times(
    asked: Mapping[TopicPartition, int],
    found: Mapping[TopicPartition, int],
    observed: Mapping[TopicPartition, Observed],
    *,
    starting: bool,
    strategy: str = "error",
) -> Offsets:
    """Offsets from ListOffsets' answers to `asked` timestamps (`found`: the first offset whose record's
    timestamp is at or after the one asked, NO_OFFSET when none is; -2/-1 asked are the log start/end),
    under the epochs the leader was observed with, as Spark's Kafka source turns them into offsets: a
    start with no record that late fails (startingOffsetsByTimestampStrategy=error) or starts at the
    latest offset (latest); an end with none is the latest offset."""
    out: Offsets = {}
    for tp, stamp in sorted(asked.items()):
        seen = observed[tp]
        offset = {EARLIEST: seen.log_start, LATEST: seen.log_end}.get(stamp, found.get(tp, NO_OFFSET))
        if offset == NO_OFFSET:
            if starting and strategy == "error":
                raise SourceOptionError(
                    f"{tp}: no record has a timestamp at or after {stamp}; option "
                    "startingOffsetsByTimestampStrategy=latest starts it at its latest offset"
                )
            offset = seen.log_end
        out[tp] = seen.at(offset)
    return out


def next_end(
    start: Mapping[TopicPartition, PartitionOffset],
    observed: Mapping[TopicPartition, Observed],
    options: PlannedOptions,
    max_rows: int | None = None,
) -> Offsets | list[Backwards]:
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
    recreated = {
        tp: (start[tp].floor, seen.at(seen.log_end).epochs)
        for tp, seen in observed.items()
        if tp in start and not start[tp].same_topic(seen.at(seen.log_end))
    }
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


def ranges(
    start: Mapping[TopicPartition, PartitionOffset], end: Mapping[TopicPartition, PartitionOffset]
) -> list[Range]:
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


def partitions_of(options: PlannedOptions, listed: Iterable[TopicPartition]) -> list[TopicPartition]:
    """The partitions of the subscription among those the cluster lists (an assignment: exactly its own)."""
    if options.assigned:
        return list(options.assigned)
    return sorted(tp for tp in listed if options.wants(tp.topic))
