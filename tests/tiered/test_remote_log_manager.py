"""The remote log task's shell with in-memory storage and metadata: who uploads, in which order,
what a new leader cleans up, and when it stops."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from quorum.broker.log_config import LogConfig
from quorum.broker.partition import Partition
from quorum.broker.remote_tier import (
    IndexType,
    RemoteSegmentMetadata,
    RemoteSegmentState,
    SegmentUpload,
    TopicIdPartition,
)
from quorum.log.epoch_cache import EpochEntry
from quorum.wire.records import Record, build_batch, patch_base_offset
from tiered_follower.remote_log_manager import RemoteLogManager

BROKER = 101


class MemoryTier:
    """RemoteStorage and RemoteLogMetadataStore in memory, recording every call in order."""

    def __init__(self) -> None:
        self.objects: dict[tuple[uuid.UUID, str], bytes] = {}
        self.events: list[RemoteSegmentMetadata] = []
        self.calls: list[str] = []
        self.on_copy = lambda segment: None
        self.custom_metadata: bytes | None = None
        """What copy_segment returns (KIP-917 custom metadata)."""

    def copy_segment(self, segment: RemoteSegmentMetadata, data: SegmentUpload) -> bytes | None:
        self.on_copy(segment)
        self.calls.append(f"copy {segment.start_offset}")
        self.objects[(segment.segment_id, "log")] = Path(data.log_path).read_bytes()
        for kind, blob in data.indexes.items():
            self.objects[(segment.segment_id, kind.value)] = blob
        return self.custom_metadata

    def fetch_log(self, segment: RemoteSegmentMetadata, start: int, end: int) -> bytes:
        return self.objects[(segment.segment_id, "log")][start:end]

    def fetch_index(self, segment: RemoteSegmentMetadata, index: IndexType) -> bytes:
        return self.objects[(segment.segment_id, index.value)]

    def delete_segment(self, segment: RemoteSegmentMetadata) -> None:
        self.calls.append(f"delete {segment.start_offset}")
        for key in [k for k in self.objects if k[0] == segment.segment_id]:
            del self.objects[key]

    def delete_partition(self, partition: TopicIdPartition) -> int:
        self.calls.append("delete partition")
        count = len(self.objects)
        self.objects.clear()
        return count

    def publish(self, segment: RemoteSegmentMetadata) -> None:
        self.calls.append(f"{segment.state.name} {segment.start_offset}")
        self.events.append(segment)

    def list_segments(self, partition: TopicIdPartition) -> list[RemoteSegmentMetadata]:
        latest: dict[uuid.UUID, RemoteSegmentMetadata] = {}
        for event in self.events:
            if event.segment_id not in latest or event.state >= latest[event.segment_id].state:
                latest[event.segment_id] = event
        return sorted(latest.values(), key=lambda s: s.start_offset)


def leader_partition(tmp_path: Path, batches: int = 30) -> Partition:
    partition = Partition("t", 0, uuid.uuid4(), tmp_path / "t-0",
                          LogConfig(segment_bytes=4096, remote_storage_enable=True, local_retention_ms=None,
                                    local_retention_bytes=0, retention_ms=None), BROKER)  # fmt: skip
    partition.update_state(BROKER, 1, (BROKER,))
    for number in range(batches):
        batch = bytearray(build_batch([Record(0, 1_700_000_000_000 + number, b"", b"v" * 900)],
                                      partition_leader_epoch=1))
        patch_base_offset(batch, 0, number)
        partition.append_as_follower(bytes(batch))
    partition.advance_high_watermark(partition.log_end_offset)
    return partition


def test_the_leader_uploads_in_order_with_the_metadata_around_the_objects_then_frees_its_disk(tmp_path):
    tier = MemoryTier()
    partition = leader_partition(tmp_path)
    rolled = [s.base_offset for s in partition.log.rolled_segments()]
    manager = RemoteLogManager(BROKER, tier, tier)
    asyncio.run(manager.run_once([partition]))
    expected = []
    for base in rolled:
        expected += [f"COPY_SEGMENT_STARTED {base}", f"copy {base}", f"COPY_SEGMENT_FINISHED {base}"]
    assert tier.calls == expected
    assert partition.remote is not None and partition.remote.highest_uploaded_offset == partition.log.start_offset - 1
    assert partition.log.start_offset == partition.log.segment_base_offsets[-1]  # local.retention.bytes=0
    assert partition.log_start_offset == 0  # the log still starts at 0, in the remote tier
    asyncio.run(manager.run_once([partition]))
    assert tier.calls == expected  # nothing more to do


def test_a_follower_uploads_nothing_and_keeps_what_is_not_uploaded(tmp_path):
    tier = MemoryTier()
    partition = leader_partition(tmp_path)
    partition.update_state(102, 2, (102, BROKER))
    asyncio.run(RemoteLogManager(BROKER, tier, tier).run_once([partition]))
    assert tier.calls == [] and partition.log.start_offset == 0


def test_a_new_leader_cleans_up_the_copy_its_predecessor_left_and_uploads_it_again(tmp_path):
    tier = MemoryTier()
    partition = leader_partition(tmp_path)
    first = partition.log.rolled_segments()[0]
    orphan = RemoteSegmentMetadata(TopicIdPartition("t", partition.topic_id, 0), uuid.uuid4(), first.base_offset,
                                   first.next_offset - 1, (EpochEntry(1, 0),), first.size, 0, 102, 1)
    tier.publish(orphan)
    tier.calls.clear()
    asyncio.run(RemoteLogManager(BROKER, tier, tier).run_once([partition]))
    assert tier.calls[:3] == ["DELETE_SEGMENT_STARTED 0", "delete 0", "DELETE_SEGMENT_FINISHED 0"]
    assert tier.calls[3:6] == ["COPY_SEGMENT_STARTED 0", "copy 0", "COPY_SEGMENT_FINISHED 0"]
    assert partition.remote is not None and partition.remote.segment_for(0).segment_id != orphan.segment_id


def test_leadership_lost_mid_run_stops_the_uploads(tmp_path):
    tier = MemoryTier()
    partition = leader_partition(tmp_path)
    assert len(partition.log.rolled_segments()) >= 3

    def lose_leadership(segment: RemoteSegmentMetadata) -> None:
        partition.update_state(102, 2, (102, BROKER))

    tier.on_copy = lose_leadership
    asyncio.run(RemoteLogManager(BROKER, tier, tier).run_once([partition]))
    assert [c for c in tier.calls if c.startswith("copy")] == ["copy 0"]


def test_a_new_leader_does_not_answer_from_what_it_knew_as_a_follower_until_it_reloads(tmp_path):
    tier = MemoryTier()
    partition = leader_partition(tmp_path)
    manager = RemoteLogManager(BROKER, tier, tier)
    asyncio.run(manager.run_once([partition]))
    assert partition.remote is not None and partition.remote.highest_uploaded_offset is not None
    partition.update_state(102, 2, (102, BROKER))
    partition.update_state(BROKER, 3, (BROKER,))
    assert partition.remote.highest_uploaded_offset is None  # unknown: ListOffsets -6 follows KIP-1023's rule
    asyncio.run(manager.run_once([partition]))
    assert partition.remote.highest_uploaded_offset == partition.log.start_offset - 1


def test_deleting_a_topic_deletes_its_remote_objects(tmp_path):
    tier = MemoryTier()
    partition = leader_partition(tmp_path)
    manager = RemoteLogManager(BROKER, tier, tier)

    async def run() -> None:
        await manager.run_once([partition])
        assert partition.remote is not None
        manager.partition_deleted(partition.remote.partition)
        await manager.close()

    asyncio.run(run())
    assert tier.calls[-1] == "delete partition" and tier.objects == {}


def test_uploaded_segments_carry_their_epochs(tmp_path):
    tier = MemoryTier()
    partition = leader_partition(tmp_path)
    rolled = [(s.base_offset, s.next_offset - 1, s.size) for s in partition.log.rolled_segments()]
    asyncio.run(RemoteLogManager(BROKER, tier, tier).run_once([partition]))
    finished = [e for e in tier.events if e.state == RemoteSegmentState.COPY_SEGMENT_FINISHED]
    assert [(e.start_offset, e.end_offset, e.size_in_bytes) for e in finished] == rolled
    assert all(e.leader_epochs == (EpochEntry(1, e.start_offset),) and e.copied for e in finished)


def test_a_topic_deleted_during_an_upload_keeps_no_object_of_it(tmp_path):
    import threading

    tier = MemoryTier()
    partition = leader_partition(tmp_path)
    manager = RemoteLogManager(BROKER, tier, tier)
    copying, release = threading.Event(), threading.Event()

    def slow_copy(segment: RemoteSegmentMetadata) -> None:
        copying.set()
        release.wait(10)

    tier.on_copy = slow_copy

    async def run() -> None:
        work = asyncio.ensure_future(manager.run_once([partition]))
        while not copying.is_set():
            await asyncio.sleep(0.01)
        assert partition.remote is not None
        manager.partition_deleted(partition.remote.partition)  # while the first copy is in flight
        release.set()
        await work
        await manager.close()

    asyncio.run(run())
    assert [c for c in tier.calls if c.startswith("copy")] == ["copy 0"]  # no copy after the deletion
    assert tier.calls[-1] == "delete partition" and tier.objects == {}


def test_refresh_reads_a_followers_remote_metadata_at_once_and_leaves_a_leaders_to_the_task(tmp_path):
    tier = MemoryTier()
    partition = leader_partition(tmp_path)
    manager = RemoteLogManager(BROKER, tier, tier)
    asyncio.run(manager.run_once([partition]))  # the leader uploads its rolled segments
    assert partition.remote is not None
    uploaded = partition.remote.highest_uploaded_offset
    follower = Partition("t", 0, partition.topic_id, tmp_path / "f", partition.config, 102)
    follower.update_state(BROKER, 2, (BROKER, 102))
    asyncio.run(RemoteLogManager(102, tier, tier).refresh(follower))  # a bootstrap's read, no task run
    assert follower.remote is not None and follower.remote.loaded
    assert uploaded is not None and uploaded > 0 and follower.remote.highest_uploaded_offset == uploaded
    partition.remote.invalidate()
    asyncio.run(manager.refresh(partition))  # a leader: the task reads it, once it leads
    assert not partition.remote.loaded


def test_kip_950_copy_disable_stops_uploads_and_local_retention_follows_retention(tmp_path):
    from dataclasses import replace

    tier = MemoryTier()
    partition = leader_partition(tmp_path)
    manager = RemoteLogManager(BROKER, tier, tier)
    asyncio.run(manager.run_once([partition]))
    uploaded = partition.remote.highest_uploaded_offset if partition.remote else None
    partition.apply_config(replace(partition.config, remote_log_copy_disable=True, local_retention_bytes=None))
    for number in range(30, 60):  # more rolled segments, never uploaded, kept on disk (retention.* is unlimited)
        batch = bytearray(build_batch([Record(0, 1_700_000_000_000 + number, b"", b"w" * 900)],
                                      partition_leader_epoch=1))  # fmt: skip
        patch_base_offset(batch, 0, number)
        partition.append_as_follower(bytes(batch))
    partition.advance_high_watermark(partition.log_end_offset)
    calls = list(tier.calls)
    asyncio.run(manager.run_once([partition]))
    assert tier.calls == calls and partition.remote is not None
    assert partition.remote.highest_uploaded_offset == uploaded and len(partition.log.rolled_segments()) > 5
    assert manager.metrics.gauge("RemoteCopyLagSegments") == 0  # reset, as Kafka does when copies stop
    assert manager.metrics.gauge("RemoteLogMetadataCount") == len(partition.remote.finished) > 0
    # what is in the tier is still read
    data = asyncio.run(manager.read(partition, 0, 1000)).read()
    assert data == tier.fetch_log(partition.remote.finished[0], 0, len(data)) and data


def test_kip_950_remote_storage_off_with_delete_on_disable_deletes_the_remote_data(tmp_path):
    from dataclasses import replace

    tier = MemoryTier()
    partition = leader_partition(tmp_path)
    manager = RemoteLogManager(BROKER, tier, tier)
    asyncio.run(manager.run_once([partition]))
    finished = [s.start_offset for s in partition.remote.finished] if partition.remote else []
    assert finished and partition.log_start_offset == 0
    tier.calls.clear()
    # without delete.on.disable (the controller refuses it; a broker default could say so): kept, no longer read
    kept = leader_partition(tmp_path / "kept")
    asyncio.run(manager.run_once([kept]))
    kept.apply_config(replace(kept.config, remote_storage_enable=False))
    asyncio.run(manager.run_once([kept]))
    assert kept.remote is None and "delete partition" not in tier.calls
    tier.calls.clear()
    partition.apply_config(replace(partition.config, remote_storage_enable=False, remote_log_delete_on_disable=True))
    asyncio.run(manager.run_once([partition]))
    started = [c for c in tier.calls if c.startswith("DELETE_SEGMENT_STARTED")]
    assert started == [f"DELETE_SEGMENT_STARTED {base}" for base in finished]
    assert tier.calls[-1] == "delete partition" and tier.objects == {}
    assert partition.remote is None and partition.log_start_offset == partition.local_log_start_offset > 0
    assert manager.metrics.gauge("RemoteLogSizeBytes") == 0
    asyncio.run(manager.run_once([partition]))  # stays off: nothing more happens
    assert partition.remote is None and tier.calls[-1] == "delete partition"


def test_the_storages_custom_metadata_is_recorded_with_copy_segment_finished(tmp_path):
    """KIP-917: what copy_segment returns travels with the finished segment, which its reads are handed."""
    tier = MemoryTier()
    tier.custom_metadata = b'{"v":1}'
    partition = leader_partition(tmp_path)
    asyncio.run(RemoteLogManager(BROKER, tier, tier).run_once([partition]))
    finished = [e for e in tier.events if e.state == RemoteSegmentState.COPY_SEGMENT_FINISHED]
    assert finished and all(e.custom_metadata == b'{"v":1}' for e in finished)
    assert partition.remote is not None
    assert all(s.custom_metadata == b'{"v":1}' for s in partition.remote.finished)


def test_custom_metadata_over_the_limit_deletes_the_copy_and_fails_it_by_the_settings_name(tmp_path, caplog):
    tier = MemoryTier()
    tier.custom_metadata = b"x" * 129
    partition = leader_partition(tmp_path)
    manager = RemoteLogManager(BROKER, tier, tier)
    asyncio.run(manager.run_once([partition]))
    assert tier.calls[:3] == ["COPY_SEGMENT_STARTED 0", "copy 0", "delete 0"]
    assert not [e for e in tier.events if e.state == RemoteSegmentState.COPY_SEGMENT_FINISHED]
    assert "remote.log.metadata.custom.metadata.max.bytes=128" in caplog.text
    tier.calls.clear()
    roomy = RemoteLogManager(BROKER, tier, tier, {"remote.log.metadata.custom.metadata.max.bytes": "129"})
    asyncio.run(roomy.run_once([partition]))
    assert "COPY_SEGMENT_FINISHED 0" in tier.calls
