"""One partition replica on this broker: its log, its producer state, and its leader's append.

A `Partition` implements `quorum.broker.partition_view.ServedPartition` for the read path and
`append_as_leader` for Produce. Its log is a `quorum.log.Log` with time indexes in
`<log dir>/<topic>-<partition>`, as Kafka names it, with a `partition.metadata` naming the topic id.

The leader append keeps the producer's bytes: the batch is validated
(`quorum.wire.records.validate_produced_records`), its records held to the topic's rules (keys on
compacted topics, timestamps in range: `quorum.broker.record_rules`), checked against the producer's sequence
(`quorum.broker.producer_state`), and stamped in place with its offset and the leader epoch,
which lie outside the CRC, so nothing is re-encoded.

The high watermark is a field. Without replication wired in (unit tests, a single broker's
tools) it follows the log end offset while this broker leads with an ISR of itself alone. With
replication (`quorum.broker.leadership`), `hw_follows_log_end` is off and the leader's
`IsrTracker` alone moves it, by `advance_high_watermark`, so that KIP-966's rule (no progress
under min.insync.replicas) is not bypassed; a follower's high watermark is the one its fetcher
sets (`set_follower_high_watermark`). Followers append the leader's batches as they are
(`append_as_follower`) and truncate where their log parts from the leader's. Durability follows
Kafka: an append reaches the page cache, which survives `kill -9` of the process; `flush.messages`
(`log.flush.interval.messages`) makes appends fsync every so many messages before they are
acknowledged, for a machine crash too.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from quorum.broker.log_answers import EpochEndOffset, OffsetOutOfRange, TimestampOffset
from quorum.broker.log_config import LogConfig
from quorum.broker.producer_state import ProducerStateError, ProducerStateManager, last_sequence
from quorum.broker.record_rules import record_errors
from quorum.broker.remote_tier import RemoteLogState
from quorum.log.cleaner import CleanerPolicy, CleanResult, clean, read_first_dirty, write_first_dirty
from quorum.log.epoch_cache import EpochEntry
from quorum.log.errors import LogError, OffsetOutOfRangeError
from quorum.log.log import Log
from quorum.log.partition_metadata import read_partition_metadata, write_partition_metadata
from quorum.log.start_intent import (
    delete_producer_snapshots,
    producer_snapshot_offsets,
    producer_snapshot_path,
    write_producer_snapshot,
)
from quorum.wire.errors import ErrorCode
from quorum.wire.producer_snapshot import (
    CorruptProducerSnapshotError,
    decode_producer_snapshot,
    encode_producer_snapshot,
)
from quorum.wire.records import (
    BATCH_HEADER_SIZE,
    CorruptRecordError,
    InvalidRecordError,
    RecordBatch,
    RecordTooLargeError,
    iter_batches,
    patch_base_offset,
    patch_log_append_time,
    patch_partition_leader_epoch,
    validate_produced_records,
)
from quorum.wire.spliced import FileRecords

logger = logging.getLogger(__name__)

BACKGROUND_ROLL_SYNC_BYTES = 16 << 20
"""Segments this large or larger are fsynced in the background when full (`Log`'s
roll_sync_in_background): Kafka's 1 GiB segment took some 0.5 s of fsync on the event loop at
each roll. A small segment's fsync is short, and its exact size is what tests and size-based
settings count on, so it rolls as before."""


def partition_dir_name(topic: str, partition: int) -> str:
    """Kafka's directory name for a partition log."""
    return f"{topic}-{partition}"


class AppendError(Exception):
    """A Produce to this partition refused; `code` is the Kafka error for the response,
    `record_errors` the records at fault, as (index in the batch, why), when the refusal is about
    records (KIP-467's RecordErrors in Produce v8+)."""

    def __init__(self, code: ErrorCode, message: str, record_errors: tuple[tuple[int, str], ...] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.record_errors = record_errors


@dataclass(frozen=True, slots=True)
class AppendResult:
    """What the Produce response reports for an appended (or duplicate) batch."""

    base_offset: int
    last_offset: int
    log_append_time: int
    log_start_offset: int
    duplicate: bool = False


class Partition:
    """A partition replica: see the module docstring."""

    def __init__(self, topic: str, partition: int, topic_id: uuid.UUID, directory: Path | str, config: LogConfig,
                 broker_id: int) -> None:
        """Open (creating if needed) the partition's log and rebuild its producer state.

        Raises CorruptLogError / CorruptFileError naming the file when the log cannot be loaded,
        and LogError when the directory belongs to another topic id (the caller deletes it first).
        """
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.broker_id = broker_id
        self.directory = Path(directory)
        self.config = config
        recorded = read_partition_metadata(self.directory) if self.directory.exists() else None
        if recorded is not None and recorded != topic_id:
            raise LogError(f"{self.directory} holds topic id {recorded}, not {topic_id}")
        self.log = Log(self.directory, segment_bytes=config.segment_bytes,
                       index_interval_bytes=config.index_interval_bytes, verify_all_segments=False,
                       time_index=True, roll_ms=config.segment_ms, keep_epochs_below_start=True,
                       roll_sync_in_background=config.segment_bytes >= BACKGROUND_ROLL_SYNC_BYTES)  # fmt: skip
        if recorded is None:
            write_partition_metadata(self.directory, topic_id)
        self.producers = ProducerStateManager(self.name)
        self.rebuild_producer_state()
        self._leader_id = -1
        self._leader_epoch = -1
        self._isr: tuple[int, ...] = ()
        self._high_watermark = self.log.start_offset
        self._unflushed = 0
        self.hw_follows_log_end = True
        """False once replication manages the high watermark (see the module docstring)."""
        self.append_listener: Callable[[Partition], None] | None = None
        """Told after every leader append (the leader's ISR tracker counts the new log end)."""
        self.remote: RemoteLogState | None = None
        """The remote tier's view of this partition's uploaded segments (KIP-405), set by the
        broker's remote tier when the topic has `remote.storage.enable`; None otherwise."""
        self._first_dirty = read_first_dirty(self.directory) or 0  # where the cleaner's last pass stopped

    def __repr__(self) -> str:
        return (f"Partition({self.name}, leader={self._leader_id}, epoch={self._leader_epoch}, "
                f"log=[{self.log_start_offset}, {self.log_end_offset}), hw={self._high_watermark})")  # fmt: skip

    @property
    def name(self) -> str:
        return partition_dir_name(self.topic, self.partition)

    # -- leadership (from the metadata image) ----------------------------------------------

    def update_state(self, leader_id: int, leader_epoch: int, isr: tuple[int, ...]) -> None:
        """The image's leader, leader epoch and ISR for this partition. An older leader epoch is
        ignored: an AlterPartition answer may have moved the leader to a newer one than the image."""
        if leader_epoch < self._leader_epoch:
            return
        if leader_epoch != self._leader_epoch or leader_id != self._leader_id:
            role = "leader" if leader_id == self.broker_id else f"follower of {leader_id}"
            logger.info("%s: %s in leader epoch %d", self.name, role, leader_epoch)
            # What this broker knows of the remote tier may be stale once another broker may have
            # led (KIP-1023: its highest uploaded offset is then unknown until the next load); an
            # epoch bumped by one while it stays leader (an ISR change) saw no other leader.
            stayed = self._leader_id == self.broker_id and leader_epoch == self._leader_epoch + 1
            if self.remote is not None and leader_id == self.broker_id and not stayed:
                self.remote.invalidate()
        self._leader_id = leader_id
        self._leader_epoch = leader_epoch
        self._isr = tuple(isr)
        self._maybe_follow_log_end()

    def apply_config(self, config: LogConfig) -> None:
        """Topic config changes: the log's roll settings take effect at the next append."""
        self.config = config
        self.log.segment_bytes = config.segment_bytes
        self.log.index_interval_bytes = config.index_interval_bytes
        self.log.roll_ms = config.segment_ms

    @property
    def leader_id(self) -> int:
        return self._leader_id

    @property
    def isr(self) -> tuple[int, ...]:
        return self._isr

    # -- ServedPartition ---------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self._leader_id == self.broker_id

    @property
    def leader_epoch(self) -> int:
        return self._leader_epoch

    @property
    def log_start_offset(self) -> int:
        """The first offset of the whole log: the first remote segment's when a remote tier holds
        the head of the log (KIP-405), else the local log's."""
        local = self.log.start_offset
        remote = self.remote.start_offset if self.remote is not None else None
        return local if remote is None else min(remote, local)

    @property
    def local_log_start_offset(self) -> int:
        """The first offset on this broker's disk (ListOffsets -4)."""
        return self.log.start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        return self._high_watermark  # no transactions

    def read(self, offset: int, max_bytes: int, upto: int) -> bytes:
        try:
            return self.log.read(offset, max_bytes, upto)
        except OffsetOutOfRangeError as exc:
            raise OffsetOutOfRange(str(exc)) from None

    def read_records(self, offset: int, max_bytes: int, upto: int) -> bytes | FileRecords:
        """`read`'s batches as a span of the segment file, not read (zero-copy Fetch)."""
        try:
            return self.log.read_records(offset, max_bytes, upto)
        except OffsetOutOfRangeError as exc:
            raise OffsetOutOfRange(str(exc)) from None

    def end_offset_for_epoch(self, leader_epoch: int) -> EpochEndOffset:
        """Kafka's leader-epoch cache answer. A leader's own epoch ends at the log end offset even
        before it wrote a batch (Kafka records the epoch when the broker becomes leader); an epoch
        above every known one is undefined."""
        entries = self.log.epoch_entries
        latest = max(entries[-1].epoch if entries else -1, self._leader_epoch if self.is_leader else -1)
        if leader_epoch > latest or leader_epoch < 0:
            return EpochEndOffset(-1, -1)
        if self.is_leader and leader_epoch == self._leader_epoch:
            return EpochEndOffset(leader_epoch, self.log.end_offset)
        if entries and leader_epoch < entries[0].epoch:
            # Kafka's LeaderEpochFileCache.endOffsetFor: an epoch below every entry ends where the
            # first one starts, so a follower that holds only such epochs truncates to there.
            return EpochEndOffset(leader_epoch, entries[0].start_offset)
        found = self.log.end_offset_for_epoch(leader_epoch)
        return EpochEndOffset(found.epoch, found.offset)

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """As Kafka's: only offsets below the high watermark count (a consumer cannot read others)."""
        found = self.log.offset_for_timestamp(timestamp)
        if found is None or found[1] >= self._high_watermark:
            return None
        return TimestampOffset(found[0], found[1])

    def max_timestamp(self) -> TimestampOffset | None:
        found = self.log.max_timestamp()
        return None if found is None else TimestampOffset(found[0], found[1])

    # -- the leader's append -----------------------------------------------------------------

    def append_as_leader(self, records: bytes | bytearray | memoryview | None, now_ms: int) -> AppendResult:
        """Validate, sequence-check, stamp and append one Produce batch; raises AppendError.

        A duplicate of one of the producer's last five batches is not written again: the
        result names the original offsets, with `duplicate` set.
        """
        if not self.is_leader:
            raise AppendError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                              f"broker {self.broker_id} is not the leader of {self.name} (leader {self._leader_id})")
        if records is None:
            raise AppendError(ErrorCode.INVALID_RECORD, "no records")
        # The request's own buffer when the listener handed one over (quorum.net.frame_reader): the
        # batch is checked, patched and written where it lies; a read-only one is copied to be patched.
        buf = records if isinstance(records, memoryview) and not records.readonly else bytearray(records)
        try:
            batch, walk = validate_produced_records(buf, self.config.max_message_bytes)
        except RecordTooLargeError as exc:
            raise AppendError(ErrorCode.MESSAGE_TOO_LARGE, str(exc)) from None
        except InvalidRecordError as exc:
            at = () if exc.record_index is None else ((exc.record_index, str(exc)),)
            raise AppendError(ErrorCode.INVALID_RECORD, str(exc), at) from None
        except CorruptRecordError as exc:
            raise AppendError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
        refused = record_errors(batch, walk, self.config, self.name, now_ms)
        if refused is not None:
            raise AppendError(refused.code, refused.message, refused.records)
        if batch.is_transactional:
            raise AppendError(ErrorCode.INVALID_RECORD, "transactional batches are not supported by this cluster")
        producer_id = batch.producer_id
        count = batch.records_count
        if producer_id >= 0:
            epoch, first_seq = batch.producer_epoch, batch.base_sequence
            last_seq = last_sequence(first_seq, batch.last_offset_delta)
            try:
                duplicate = self.producers.check(producer_id, epoch, first_seq, last_seq)
            except ProducerStateError as exc:
                raise AppendError(exc.code, exc.message) from None
            if duplicate is not None:
                logger.debug("%s: duplicate batch of producer %d (sequences %d..%d) answered with offset %d",
                             self.name, producer_id, first_seq, last_seq, duplicate.first_offset)  # fmt: skip
                return AppendResult(duplicate.first_offset, duplicate.last_offset,
                                    duplicate.timestamp if self.config.log_append_time else -1,
                                    self.log.start_offset, duplicate=True)  # fmt: skip
        base = self.log.end_offset
        patch_base_offset(buf, 0, base)
        patch_partition_leader_epoch(buf, 0, self._leader_epoch)
        append_time = -1
        if self.config.log_append_time:
            append_time = now_ms
            patch_log_append_time(buf, 0, now_ms)
        try:
            self.log.append(buf, crc_checked=True)  # validate_produced_batch checked it
        except (LogError, OSError) as exc:
            logger.error("%s: append failed: %s", self.name, exc)
            if producer_id >= 0:  # its batches behind this one must not be taken for a sequence gap
                self.producers.note_failed_append(producer_id, batch.producer_epoch, batch.base_sequence)
            raise AppendError(ErrorCode.KAFKA_STORAGE_ERROR, f"{self.name}: {exc}") from None
        last = base + count - 1
        if producer_id >= 0:
            self.producers.update(producer_id, batch.producer_epoch, batch.base_sequence,
                                  last_sequence(batch.base_sequence, batch.last_offset_delta), base, last,
                                  append_time if append_time >= 0 else batch.max_timestamp)  # fmt: skip
        self._unflushed += count
        if self.config.flush_messages is not None and self._unflushed >= self.config.flush_messages:
            self.flush()
        self._maybe_follow_log_end()
        if self.append_listener is not None:
            self.append_listener(self)
        return AppendResult(base, last, append_time, self.log.start_offset)

    # -- the follower's log ------------------------------------------------------------------

    def append_as_follower(self, records: bytes, crc_checked: bool = False) -> int:
        """Append the leader's batches as they are (offsets and leader epochs assigned by the
        leader; `Log.append` checks CRCs, offsets and epochs and fills the epoch cache); the
        producer state follows, so this replica can dedupe idempotent producers once it leads.
        `crc_checked`: the caller verified every batch's CRC (the replica fetcher's core does, before
        it asks for the append), so it is not computed twice.
        Returns the new log end offset; raises LogError or OSError."""
        end = self.log.append(records, crc_checked=crc_checked)
        count = 0
        for batch in iter_batches(records):
            count += batch.last_offset_delta + 1
            if batch.producer_id >= 0:
                self.producers.replay(batch.producer_id, batch.producer_epoch, batch.base_sequence,
                                      batch.last_offset_delta, batch.base_offset, batch.max_timestamp)  # fmt: skip
        self._unflushed += count
        if self.config.flush_messages is not None and self._unflushed >= self.config.flush_messages:
            self.flush()
        return end

    def truncate_to(self, offset: int) -> None:
        """Remove everything at and after `offset`; an offset inside a batch takes that whole batch
        (Kafka's LogSegment.truncateTo). The producer state is rebuilt from what is left."""
        if offset >= self.log.end_offset:
            return
        offset = max(offset, self.log.start_offset)
        data = self.log.read(offset, BATCH_HEADER_SIZE)
        if len(data) >= BATCH_HEADER_SIZE:
            offset = min(offset, RecordBatch(data).base_offset)
        self.log.truncate_to(offset)
        self._first_dirty = min(self._first_dirty, self.log.end_offset)  # what comes after is new
        self._high_watermark = min(self._high_watermark, self.log.end_offset)
        self.rebuild_producer_state()

    def start_at(self, offset: int, leader_epochs: Iterable[EpochEntry] = (),
                 producer_snapshot: bytes | None = None) -> None:
        """Replace the log by an empty one at `offset`: the leader's log start is past our end
        (Kafka's truncateFullyAndStartAt), or a remote tier holds everything below `offset`
        (KIP-405, KIP-1023). The leader-epoch cache then holds `leader_epochs` (entries below
        `offset`) and the producer state is `producer_snapshot`'s (Kafka's `.snapshot` bytes), both
        durable (`Log.start_empty_at`: a crash leaves the old log or this one), so a restart keeps
        recognising an idempotent producer's retries. The snapshot is decoded before anything is
        touched: CorruptProducerSnapshotError (a ValueError) leaves the log as it was."""
        entries = decode_producer_snapshot(producer_snapshot) if producer_snapshot is not None else []
        self.log.start_empty_at(offset, tuple(leader_epochs), producer_snapshot)
        self._high_watermark = offset
        self._first_dirty = offset
        self._unflushed = 0
        self.producers.load_snapshot(entries)

    def set_follower_high_watermark(self, offset: int) -> None:
        """A follower's high watermark is the leader's as its fetcher last saw it, within our log."""
        self._high_watermark = max(self.log.start_offset, min(offset, self.log.end_offset))

    def increment_log_start_offset(self, offset: int) -> None:
        """Follow the leader's log start (retention, DeleteRecords) up to `offset`."""
        if self.log.advance_start_offset(min(offset, self.log.end_offset)):
            self._keep_producer_snapshot()
        self._maybe_follow_log_end()

    def flush(self) -> None:
        try:
            self.log.flush()
        except (LogError, OSError) as exc:
            raise AppendError(ErrorCode.KAFKA_STORAGE_ERROR, f"{self.name}: flush failed: {exc}") from None
        self._unflushed = 0

    # -- the high watermark ------------------------------------------------------------------

    def advance_high_watermark(self, offset: int) -> bool:
        """Move the high watermark up to `offset` (capped at the log end); the replication code's
        hook. Returns whether it moved; the caller wakes waiters (`AppendNotifier.appended`)."""
        offset = min(offset, self.log.end_offset)
        if offset <= self._high_watermark:
            return False
        self._high_watermark = offset
        return True

    def _maybe_follow_log_end(self) -> None:
        """With this broker leading alone (the ISR is itself), everything appended is committed."""
        if self.hw_follows_log_end and self.is_leader and set(self._isr) <= {self.broker_id}:
            self.advance_high_watermark(self.log.end_offset)
        if self._high_watermark < self.log.start_offset:
            self._high_watermark = self.log.start_offset

    # -- housekeeping ------------------------------------------------------------------------

    def delete_old_segments(self, now_ms: int) -> int:
        """`retention.ms` and `retention.bytes`, never past the high watermark. A tiered partition
        keeps `local.retention.*` on its disk instead and deletes only segments already uploaded
        (KIP-405): none before its remote metadata is loaded; the remote tier applies `retention.*`
        to the whole log. With `remote.log.copy.disable` (KIP-950) nothing more is uploaded, so, as
        Kafka's UnifiedLog, local segments go by `retention.*` again, uploaded or not. A topic
        whose `cleanup.policy` lacks `delete` keeps its segments (Kafka's `config.delete`):
        compaction alone bounds it."""
        upto = self._high_watermark
        if not self.config.deletes:
            self._maybe_follow_log_end()
            return 0
        retention_ms, retention_bytes = self.config.retention_ms, self.config.retention_bytes
        if self.remote is not None and not self.config.remote_log_copy_disable:  # KIP-950: copying, see above
            uploaded = self.remote.highest_uploaded_offset
            if uploaded is None or uploaded < 0:
                return 0
            upto = min(upto, uploaded + 1)
            retention_ms, retention_bytes = self.config.local_retention_ms, self.config.local_retention_bytes
        deleted = self.log.delete_old_segments(now_ms, retention_ms, retention_bytes, upto=upto)
        if deleted:
            self._keep_producer_snapshot()
        self._maybe_follow_log_end()
        return deleted

    def clean(self, now_ms: int) -> CleanResult | None:
        """One log-cleaner pass (`quorum.log.cleaner`) if the topic is compacted; None otherwise,
        and for a tiered topic (Kafka refuses compaction with remote storage). Called on the
        cleaner's thread: the log's lock orders it with appends, reads and truncations."""
        config = self.config
        if not config.compacted or config.remote_storage_enable:
            return None
        policy = CleanerPolicy(config.min_cleanable_dirty_ratio, config.delete_retention_ms,
                               config.min_compaction_lag_ms, config.max_compaction_lag_ms)  # fmt: skip
        result = clean(self.log, self._high_watermark, max(self._first_dirty, self.log.start_offset), policy, now_ms)
        if result.first_dirty != self._first_dirty:
            write_first_dirty(self.directory, result.first_dirty)
            self._first_dirty = result.first_dirty
        return result

    def rebuild_producer_state(self) -> None:
        """Producer state (at open, and after a truncation): the producer snapshot the log holds
        (`<offset>.snapshot`, written when the log started from a remote tier at that offset), then
        the batch headers from there. A snapshot past the log end (a truncation went below it) or
        below its start is deleted; a damaged one is ignored, with a warning naming it."""
        self.producers.clear()
        start, end = self.log.start_offset, self.log.end_offset
        usable = [offset for offset in producer_snapshot_offsets(self.directory) if start <= offset <= end]
        replay_from = start
        if usable:
            path = producer_snapshot_path(self.directory, usable[-1])
            try:
                self.producers.load_snapshot(decode_producer_snapshot(path.read_bytes()))
                replay_from = usable[-1]
            except (CorruptProducerSnapshotError, OSError) as exc:
                logger.warning("%s: producer snapshot %s not loaded: %s", self.name, path, exc)
                self.producers.clear()
        delete_producer_snapshots(self.directory, keep=replay_from if usable and replay_from == usable[-1] else None)
        for batch in self.log.iter_batches(replay_from):
            if batch.producer_id >= 0 and batch.base_offset >= replay_from:
                self.producers.replay(batch.producer_id, batch.producer_epoch, batch.base_sequence,
                                      batch.last_offset_delta, batch.base_offset, batch.max_timestamp)  # fmt: skip

    def _keep_producer_snapshot(self) -> None:
        """The log start moved past the producer snapshot: the records that would rebuild what it
        held are gone, so the state as it is now is written as a snapshot at the log end (after a
        flush: the snapshot must not be ahead of the records)."""
        offsets = producer_snapshot_offsets(self.directory)
        if not offsets or offsets[-1] >= self.log.start_offset:
            return
        self.log.flush()
        end = self.log.end_offset
        write_producer_snapshot(self.directory, end, encode_producer_snapshot(self.producers.snapshot()))
        delete_producer_snapshots(self.directory, keep=end)

    def close(self) -> None:
        self.log.close()

