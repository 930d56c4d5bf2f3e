"""Offset translation, sans IO: when to write an offset sync, how a committed source offset becomes a
target offset, which groups are checkpointed, and what is committed on the target (MM2's checkpoints).

The design: an offset-syncs topic, refined by provenance headers
----------------------------------------------------------------
Every copy already names its source offset (`client_epochs.source`), so a target offset could be
found by searching the target partition's headers. Translation reads MM2's offset syncs instead:
small (topic, partition) -> (upstream, downstream) records in `mm2-offset-syncs.<target>.internal`
on the source cluster, in MM2's format (`quorum.wire.mm2_records`), written from the producer's
delivery callback, i.e. only for copies the target acknowledged, with the target offset the
callback reports. Why: it is MM2's contract (its checkpoint connector, formatters and
RemoteClusterUtils read ours, and a user moving from MM2 keeps their tooling); checkpointing then
reads one small topic rather than fetching from every mirrored target partition (large, possibly
tiered, compacted or not readable by the checkpointing principal); and syncs stay true even where
provenance is not monotonic (the at-least-once cases of the replicator's docstring).

The headers then make it exact (`refine`, on unless `exact_with_provenance` is off): from the
conservative target offset t, the checkpointing reads the target partition forward, at most
`offset.lag.max` records, to the first copy of a source offset >= g, and checkpoints that copy's
offset (or the partition's end, when it reached the end without finding one). Safe for the same
reason as t: every copy of an offset >= g at or after t is at or after the first of them. When the
read finds nothing within its bound or fails, t stands.

The sync rule (writer, `SyncRule`, per source partition and assignment)
------------------------------------------------------------------------
A sync (u, d) says "source offset u was copied to target offset d, and the target acknowledged it".
One is written for the first acknowledged copy after each assignment; for every acknowledged copy
whose (d - u) differs from the previous copy's (a source gap: transaction markers, compaction, an
aborted transaction; a duplicate after a restart; a foreign write in the target), or that comes
out of order; when the copy is `offset.lag.max` (MM2's name, default 100) or more target offsets
past the last sync; and, every `offset_syncs_interval_s`, for the last acknowledged copy if it was
not synced yet (the "high mark", so that a group that caught up translates exactly).

The translation rule (reader, `SyncHistory.translate`) - MM2's
---------------------------------------------------------------
For a committed source offset g, take the sync S = (u, d) with the largest u <= g. Then
t = d when g == u, and t = d + 1 when g > u. No such sync: no translation (no checkpoint).

Why t never skips a record (proof sketch). Assume what the replicator assumes for "never
duplicates": one replicator writes a target partition at a time, each run copies its source
partition in increasing offset order from its resume point, and a run resumes at most one past
the last copy the target holds (the committed offset, or the target's last copy + 1, whichever is
greater; both are <= one past the last copy of the run before). Lemma: for a sync (u, d), every
source offset v > u that gets copied has a copy at a target offset > d. The run R that copied u at
d goes on in order, so it writes v after d (later writes land at higher offsets of one partition),
unless R stops first; then the next run resumes at or below one past R's last copy, so it copies
v, again after d; by induction over runs. The claim follows: for every copied v >= g, v == u == g
has its copy at d == t; v > u has one at >= d + 1 >= t. The argument uses only that S is true (an
acknowledged copy), so it holds for any subset of the syncs: a lost sync (a kill -9 before it was
written), one removed by retention, or one out of order can only make translation coarser or
impossible, never wrong. A consumer that fails over to t therefore reads every record at or after
its source commit, and may read again the copies of offsets u+1 .. g-1 (the window).

The window: translation is exact when g == u, or g == u + 1 with u + 1 copied next (a group that has
read everything the high mark covers). Otherwise the consumer re-reads at most the copies of the
source offsets between the last sync at or below g and g: fewer than `offset.lag.max` records once
the replicator has copied past g and its syncs for those copies were written, plus, for a group
committed ahead of the replicator, the records between the last high mark and g. With the
provenance refinement the checkpoints have no window whenever that first copy lies within the
offset.lag.max records read (so always in the first case). Not covered: the
at-least-once cases of the replicator (a second replicator or another writer in the same target
partition, a zombie owner writing after losing the partition; the writer writes syncs only for
partitions it still owns), where target offsets no longer grow with source offsets.

History: `SyncHistory` keeps the syncs of a partition increasing in both offsets: a sync whose u is
not above the newest (a rewound copy) replaces those at or above it (it is newer truth about those
offsets), one whose d is not above the newest (the target partition was truncated or recreated:
syncs there may name copies it no longer holds, which the lemma's "true" excludes) replaces those
at or above its d, and past `MAX_SYNCS` every other one of the older half is dropped (coarser, still safe).
The offset-syncs topic is created with cleanup.policy=delete and a retention (default 7 days, as
Kafka's log.retention.hours) rather than MM2's compaction: the key is the partition, so compaction
would keep only the newest sync of each partition and a group committed behind it could never be
translated again after a restart. Set the retention at least as long as the source topics' so that
any committed offset the source still holds has a sync at or below it.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from client_epochs.mirror import filters
from client_epochs.mirror.filters import PatternList
from client_epochs.mirror.progress import ProvenanceError, read_provenance
from client_epochs.model import TopicPartition
from quorum.wire.internal_metadata import InternalMetadata, InvalidInternalMetadataError, decode, encode
from quorum.wire.mm2_records import Checkpoint, OffsetSync

OFFSET_LAG_MAX_DEFAULT = 100
"""MM2's offset.lag.max."""
GROUPS_DEFAULT = tuple(item.strip() for item in filters.GROUPS_DEFAULT.split(","))
"""MM2's groups."""
GROUPS_EXCLUDE_DEFAULT = tuple(item.strip() for item in filters.GROUPS_EXCLUDE_DEFAULT.split(","))
"""MM2's groups.exclude."""
MAX_SYNCS = 4096
"""Syncs kept per source partition in memory before older ones are thinned out."""
SYNC_STATES = frozenset({"EMPTY", "DEAD"})
"""Target group states in which MM2 commits translated offsets: nobody consumes there."""


def offset_syncs_topic(target_alias: str) -> str:
    """MM2's offset-syncs topic for a target cluster alias (on the source cluster)."""
    return f"mm2-offset-syncs.{target_alias}.internal"


def checkpoints_topic(source_alias: str) -> str:
    """MM2's checkpoints topic for a source cluster alias (on the target cluster)."""
    return f"{source_alias}.checkpoints.internal"


def same_name(topic: str) -> str:
    """The target topic of a source topic without renaming (IdentityReplicationPolicy)."""
    return topic


@dataclass
class OffsetTranslationOptions:
    """Offset syncs, checkpoints and group offset sync; MM2's config names in the docs."""

    source_alias: str = "source"
    target_alias: str = "target"
    target_topic: Callable[[str], str] = same_name
    """Source topic -> target topic name (the replication policy's renaming)."""
    offset_lag_max: int = OFFSET_LAG_MAX_DEFAULT
    """offset.lag.max: a sync at least every this many target offsets."""
    offset_syncs_interval_s: float = 5.0
    """How often the last acknowledged copy is synced when it was not (the high mark)."""
    offset_syncs_retention_ms: int = 7 * 24 * 3600 * 1000
    """retention.ms of the offset-syncs topic when this creates it (cleanup.policy=delete)."""
    emit_checkpoints_enabled: bool = True
    """emit.checkpoints.enabled."""
    emit_checkpoints_interval_s: float = 60.0
    """emit.checkpoints.interval.seconds."""
    groups: Sequence[str] = GROUPS_DEFAULT
    """groups: regexes (Java's, full match) of the source groups to checkpoint."""
    groups_exclude: Sequence[str] = GROUPS_EXCLUDE_DEFAULT
    """groups.exclude."""
    sync_group_offsets_enabled: bool = False
    """sync.group.offsets.enabled."""
    sync_group_offsets_interval_s: float = 60.0
    """sync.group.offsets.interval.seconds."""
    emit_offset_syncs_enabled: bool = True
    """emit.offset-syncs.enabled: without syncs, checkpoints translate only what older syncs cover."""
    offset_syncs_topic_replication_factor: int | None = None
    """offset-syncs.topic.replication.factor when this creates the topic; None: the cluster's default (MM2: 3)."""
    checkpoints_topic_replication_factor: int | None = None
    """checkpoints.topic.replication.factor when this creates the topic; None: the cluster's default (MM2: 3)."""
    exact_with_provenance: bool = True
    """Refine each translation from the target's provenance headers (module docstring); this project's own."""
    read_timeout_s: float = 30.0
    """How long one read of a topic's end, or one admin call, may take."""

    def check(self) -> None:
        for name in ("offset_syncs_interval_s", "emit_checkpoints_interval_s", "sync_group_offsets_interval_s",
                     "read_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, not {getattr(self, name)!r}")
        if self.offset_syncs_retention_ms != -1 and self.offset_syncs_retention_ms < 1:
            raise ValueError(f"offset_syncs_retention_ms must be positive or -1 (forever), not "
                             f"{self.offset_syncs_retention_ms!r}")
        if self.offset_lag_max < 1:
            raise ValueError(f"offset_lag_max must be 1 or more, not {self.offset_lag_max!r}")
        GroupFilter(self.groups, self.groups_exclude)  # the patterns compile

    @classmethod
    def from_mm2(cls, properties: Mapping[str, str], source_alias: str = "source", target_alias: str = "target",
                 target_topic: Callable[[str], str] = same_name) -> OffsetTranslationOptions:
        """The options of one flow from its MM2 properties (already resolved for the flow, without its
        "A->B." prefix); other keys are not this one's business and are ignored. ValueError names a
        value that does not parse, and offset-syncs.topic.location=target, which is not supported."""
        location = properties.get("offset-syncs.topic.location", "source").strip()
        if location != "source":
            raise ValueError(f"offset-syncs.topic.location={location!r}: only 'source' (MM2's default) is supported")
        options = cls(source_alias=source_alias, target_alias=target_alias, target_topic=target_topic)
        for key, (name, parse) in _MM2_KEYS.items():
            if key in properties:
                try:
                    setattr(options, name, parse(properties[key]))
                except ValueError:
                    raise ValueError(f"{key}={properties[key]!r} is not a valid value") from None
        options.check()
        return options


def _boolean(value: str) -> bool:
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise ValueError(value)
    return text == "true"


def _factor(value: str) -> int | None:
    number = int(value.strip())
    return None if number == -1 else number


_MM2_KEYS: dict[str, tuple[str, Callable[[str], object]]] = {
    "offset.lag.max": ("offset_lag_max", lambda v: int(v.strip())),
    "emit.offset-syncs.enabled": ("emit_offset_syncs_enabled", _boolean),
    "emit.checkpoints.enabled": ("emit_checkpoints_enabled", _boolean),
    "emit.checkpoints.interval.seconds": ("emit_checkpoints_interval_s", lambda v: float(v.strip())),
    "groups": ("groups", lambda v: parse_list(v)),
    "groups.exclude": ("groups_exclude", lambda v: parse_list(v)),
    "sync.group.offsets.enabled": ("sync_group_offsets_enabled", _boolean),
    "sync.group.offsets.interval.seconds": ("sync_group_offsets_interval_s", lambda v: float(v.strip())),
    "offset-syncs.topic.replication.factor": ("offset_syncs_topic_replication_factor", _factor),
    "checkpoints.topic.replication.factor": ("checkpoints_topic_replication_factor", _factor),
    "offset-syncs.topic.retention.ms": ("offset_syncs_retention_ms", lambda v: int(v.strip())),
}
"""MM2's keys for offset translation (offset-syncs.topic.retention.ms is this project's own)."""


# --- the writer's rule ----------------------------------------------------------------------------------


@dataclass(slots=True)
class SyncRule:
    """When one source partition's acknowledged copies need an offset sync (module docstring)."""

    lag_max: int = OFFSET_LAG_MAX_DEFAULT
    last: tuple[int, int] | None = None
    """The last acknowledged copy (source offset, target offset)."""
    synced: tuple[int, int] | None = None
    """The last copy a sync was written for, in this assignment."""

    def copied(self, upstream: int, downstream: int) -> bool:
        """The target acknowledged the copy of `upstream` at `downstream`: True when it needs a sync now."""
        previous, self.last = self.last, (upstream, downstream)
        need = (self.synced is None or previous is None
                or upstream <= previous[0] or downstream <= previous[1]
                or downstream - upstream != previous[1] - previous[0]
                or downstream - self.synced[1] >= self.lag_max)
        if need:
            self.synced = self.last
        return need

    def high_mark(self) -> tuple[int, int] | None:
        """The last acknowledged copy when it has no sync yet (then it counts as synced)."""
        if self.last is None or self.last == self.synced:
            return None
        self.synced = self.last
        return self.last


# --- the reader's history and rule ----------------------------------------------------------------------


@dataclass(slots=True)
class SyncHistory:
    """The offset syncs of one source partition, sorted by upstream offset (module docstring)."""

    upstream: list[int] = field(default_factory=list)
    downstream: list[int] = field(default_factory=list)
    limit: int = MAX_SYNCS

    def add(self, upstream: int, downstream: int) -> None:
        if upstream < 0 or downstream < 0:
            return  # not a copy (MM2 never writes these)
        if self.upstream and upstream <= self.upstream[-1]:
            cut = bisect.bisect_left(self.upstream, upstream)
            del self.upstream[cut:], self.downstream[cut:]
        if self.downstream and downstream <= self.downstream[-1]:  # the target lost or recreated its log
            cut = bisect.bisect_left(self.downstream, downstream)
            del self.upstream[cut:], self.downstream[cut:]
        self.upstream.append(upstream)
        self.downstream.append(downstream)
        if len(self.upstream) > self.limit:
            half = len(self.upstream) // 2
            keep = list(range(0, half, 2)) + list(range(half, len(self.upstream)))
            self.upstream[:] = [self.upstream[i] for i in keep]
            self.downstream[:] = [self.downstream[i] for i in keep]

    def translate(self, committed: int) -> int | None:
        """The target offset for a committed source offset; None when no sync is at or below it."""
        if committed < 0:
            return None
        at = bisect.bisect_right(self.upstream, committed) - 1
        if at < 0:
            return None
        return self.downstream[at] + (0 if self.upstream[at] == committed else 1)

    def __len__(self) -> int:
        return len(self.upstream)


def apply_syncs(histories: dict[TopicPartition, SyncHistory], syncs: Iterable[OffsetSync]) -> None:
    """Syncs read from the topic, in its order, into each partition's history."""
    for sync in syncs:
        tp = TopicPartition(sync.topic, sync.partition)
        history = histories.get(tp)
        if history is None:
            history = histories[tp] = SyncHistory()
        history.add(sync.upstream, sync.downstream)


# --- which groups, what to checkpoint, what to commit ---------------------------------------------------


def parse_list(value: str) -> list[str]:
    """A Kafka LIST config value: comma-separated, items trimmed, empty items dropped."""
    return [item.strip() for item in value.split(",") if item.strip()]


class GroupFilter:
    """MM2's DefaultGroupFilter: a group is checkpointed when a `groups` regex matches all of it and no
    `groups.exclude` regex does (Java regexes joined by "|"; Python's `re` reads the usual ones the same).
    An empty list matches nothing. `own` names groups never checkpointed (the replicator's)."""

    def __init__(self, include: Sequence[str] = GROUPS_DEFAULT, exclude: Sequence[str] = GROUPS_EXCLUDE_DEFAULT,
                 own: Iterable[str] = ()) -> None:
        self._include = _compile(include, "groups")
        self._exclude = _compile(exclude, "groups.exclude")
        self._own = frozenset(own)

    def __call__(self, group: str) -> bool:
        if group in self._own or self._include is None or not self._include.fullmatch(group):
            return False
        return self._exclude is None or not self._exclude.fullmatch(group)


def _compile(patterns: Sequence[str] | str, name: str) -> re.Pattern[str] | None:
    text = patterns if isinstance(patterns, str) else ", ".join(patterns)
    return PatternList.of(name, text).pattern


def user_metadata(metadata: str | None) -> str:
    """A source commit's metadata for its checkpoint: the user's part only. Internal metadata names the
    source topic's epochs and id, which say nothing about the target topic."""
    try:
        user, _ = decode(metadata)
    except InvalidInternalMetadataError:
        user = metadata or ""
    return user.removesuffix("\x00")


@dataclass(frozen=True, slots=True)
class Committed:
    """A source group's committed offset of one partition, as OffsetFetch gives it."""

    offset: int
    metadata: str | None = None


Refine = Callable[[TopicPartition, TopicPartition, int, int], int]
"""(target partition, source partition, committed source offset, conservative target offset) -> target offset."""


def checkpoints_for_group(group: str, committed: Mapping[TopicPartition, Committed],
                          histories: Mapping[TopicPartition, SyncHistory], target_topic: Callable[[str], str],
                          last: Mapping[TopicPartition, Checkpoint], exact: Refine | None = None,
                          ) -> dict[TopicPartition, Checkpoint]:
    """The checkpoints to write now for `group`, by target partition (MM2's checkpointsForGroup).

    Partitions without a commit or without a sync at or below it are left out. `last` holds the
    checkpoints written before, by target partition: one is written again only when the group
    rewound on the source, or when its target offset advanced (checkpoints never go backwards
    otherwise, as MM2's). `exact`, when given, refines each translation (`refine`)."""
    out: dict[TopicPartition, Checkpoint] = {}
    for tp, commit in sorted(committed.items()):
        history = histories.get(tp)
        if history is None or commit.offset < 0:
            continue
        translated = history.translate(commit.offset)
        if translated is None:
            continue
        target = TopicPartition(target_topic(tp.topic), tp.partition)
        if exact is not None:
            translated = exact(target, tp, commit.offset, translated)
        checkpoint = Checkpoint(group, target.topic, target.partition, commit.offset, translated,
                                user_metadata(commit.metadata))
        before = last.get(target)
        if before is None or checkpoint.upstream < before.upstream or checkpoint.downstream > before.downstream:
            out[target] = checkpoint
    return out


def first_copy(records: Iterable[tuple[int, Iterable[tuple[str, bytes | str | None]] | None]],
               source: TopicPartition, committed: int) -> int | None:
    """Of target records ((offset, headers), in order), the offset of the first that copies an offset
    >= `committed` of `source`; records of other writers or sources, or with unreadable provenance, are passed."""
    for offset, headers in records:
        try:
            copied = read_provenance(headers)
        except ProvenanceError:
            continue
        if copied is not None and copied.source.tp == source and copied.source.offset >= committed:
            return offset
    return None


def refine(records: Sequence[tuple[int, Iterable[tuple[str, bytes | str | None]] | None]], source: TopicPartition,
           committed: int, translated: int, end: int | None) -> int:
    """The exact target offset for committed source offset `committed` of `source`, from the target
    records read forward from `translated` (`first_copy`); else `end` (the high watermark) when the
    records read reach it; else `translated`."""
    found = first_copy(records, source, committed)
    if found is not None:
        return found
    last = records[-1][0] if records else translated - 1
    if end is not None and last + 1 >= end:
        return max(end, translated)
    return translated


def latest_checkpoints(records: Iterable[Checkpoint], group: str) -> dict[TopicPartition, Checkpoint]:
    """The newest checkpoint of each target partition of `group`, from the topic in its order."""
    found: dict[TopicPartition, Checkpoint] = {}
    for checkpoint in records:
        if checkpoint.group == group:
            found[TopicPartition(checkpoint.topic, checkpoint.partition)] = checkpoint
    return found


def offsets_to_sync(checkpoints: Mapping[TopicPartition, Checkpoint], target_committed: Mapping[TopicPartition, int],
                    ) -> dict[TopicPartition, int]:
    """Target offsets to commit for a group that is Empty or Dead on the target: each checkpoint whose
    offset is past what the target group has committed (none, or a negative offset, counts as behind),
    so a commit there never goes backwards (MM2's syncGroupOffset)."""
    out = {}
    for tp, checkpoint in checkpoints.items():
        current = target_committed.get(tp)
        if current is None or current < 0 or checkpoint.downstream > current:
            out[tp] = checkpoint.downstream
    return out


def target_commit_metadata(checkpoint: Checkpoint, epochs: InternalMetadata | None) -> str:
    """The metadata string committed on the target: the user's metadata from the source commit, with
    KIP-232 internal metadata naming the *target* topic's epochs and id (none when unknown)."""
    return encode(checkpoint.metadata, None if epochs is None or epochs.is_unknown else epochs)
