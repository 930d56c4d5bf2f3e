"""A broker removed from a partition's replicas by a reassignment (KIP-455) stops hosting it and
deletes its local log, as Kafka's StopReplica with delete; the topic lives on, so its remote tier
data (KIP-405) stays. Deleting the topic, by contrast, deletes the remote data too."""

from __future__ import annotations

import uuid

from quorum.broker.log_config import TOPIC_RESOURCE
from quorum.broker.partition import Partition
from quorum.broker.remote_tier import RemoteLogState, TopicIdPartition
from quorum.broker.replica_manager import ReplicaManager
from quorum.image.image import PartitionInfo, TopicInfo
from tests.broker.test_partition import T0, client_batch
from tests.broker.test_replica_manager import image

TIERED = uuid.UUID(int=0x7E)
CONFIGS = {(TOPIC_RESOURCE, "tiered"): {"remote.storage.enable": "true"}}


class RecordingTier:
    """The parts of a RemoteTier the replica manager calls when it opens and drops partitions."""

    def __init__(self) -> None:
        self.deleted: list[TopicIdPartition] = []

    def partition_opened(self, partition: Partition) -> None:
        if partition.config.remote_storage_enable:
            partition.remote = RemoteLogState(TopicIdPartition(partition.topic_id, partition.partition,
                                                               partition.topic))

    def partition_deleted(self, partition: TopicIdPartition) -> None:
        self.deleted.append(partition)


def tiered(replicas: tuple[int, ...], leader: int, adding: tuple[int, ...] = (),
           removing: tuple[int, ...] = ()) -> TopicInfo:
    return TopicInfo("tiered", TIERED, (PartitionInfo(0, leader, 3, replicas, replicas, (), 5, removing, adding),))


def test_reassigned_away_deletes_the_local_log_and_keeps_the_remote_data(tmp_path) -> None:
    remote = RecordingTier()
    manager = ReplicaManager(1, [tmp_path], remote=remote)  # type: ignore[arg-type]
    manager.apply_image(image(tiered((1, 2), 1), configs=CONFIGS))
    hosted = manager.get("tiered", 0)
    assert hosted is not None and hosted.remote is not None
    hosted.append_as_leader(client_batch(5), T0)
    # The reassignment to [2, 3] is in progress: broker 1 still hosts (and leads) it.
    manager.apply_image(image(tiered((2, 3, 1), 1, adding=(3,), removing=(1,)), configs=CONFIGS))
    assert manager.get("tiered", 0) is hosted and hosted.is_leader
    # Completed: broker 1 is no longer a replica.
    manager.apply_image(image(tiered((2, 3), 2), configs=CONFIGS))
    assert manager.get("tiered", 0) is None and manager.get_by_id(TIERED, 0) is None
    assert not (tmp_path / "tiered-0").exists() and not list(tmp_path.glob("tiered-0*"))
    assert remote.deleted == []  # the topic still exists: its segments in S3 belong to the other replicas too
    manager.close()


def test_deleting_the_topic_deletes_its_remote_data(tmp_path) -> None:
    remote = RecordingTier()
    manager = ReplicaManager(1, [tmp_path], remote=remote)  # type: ignore[arg-type]
    manager.apply_image(image(tiered((1, 2), 1), configs=CONFIGS))
    manager.apply_image(image())
    assert remote.deleted == [TopicIdPartition(TIERED, 0, "tiered")]
    manager.close()
