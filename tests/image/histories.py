"""Random metadata histories, applied incrementally and replayed in full: the images must agree
after every step (issue 21). Shared by `tests/image/test_image_histories.py` (250 histories in
the suite) and `benchmarks/image_histories.py` (the longer run).

`ImageHistories` is a hypothesis RuleBasedStateMachine. Its rules write what a controller writes
(topics created with their partitions in one batch, deleted, created again under the same name,
partitions added with a higher TopicEpoch, leaders and ISRs changed, brokers registered, fenced,
unfenced and unregistered, topic and broker configs set and deleted, feature levels) plus
records a stale or confused writer could leave (an epoch that is not the registered one, a
change to a deleted topic), which every path must ignore alike. Records gather into an open
batch; `commit` applies it, and the state then holds the same image along four paths:

* `incremental`: what a node does, one delta per committed batch (`ImageState.apply`), with
  images read between some records, as a single-threaded reader may;
* `stepped`: one image built after every record;
* a full replay of the whole history into a fresh state, one delta;
* `restarted`: the last snapshot taken (`snapshot`, the incremental state's snapshot records)
  loaded into a fresh state, then every batch committed after it, as a restarted node does.

Each is compared with a replay through the schema engine with every partition decoded at once
(`ImageState(lazy=False)`), as is a full replay with lazy partitions. The incremental and
replayed states must also write byte-identical snapshots.
"""

from __future__ import annotations

import uuid

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from quorum.image.compare import image_difference
from quorum.image.image_state import ImageState
from quorum.wire import metadata_records as mr
from quorum.wire.metadata_records import encode_metadata_record

BROKER_IDS = st.integers(1, 4)
NAMES = st.sampled_from(["a", "b", "c", "d"])
TOPIC, BROKER = 2, 4  # ConfigResource types
COUNTS = {"histories": 0, "records": 0, "commits": 0, "snapshots": 0}
"""What the histories ran, for the benchmark's figure."""


def _record(record: object) -> bytes:
    return encode_metadata_record(record)


def replayed(history: list[bytes], *, lazy: bool = True) -> ImageState:
    """The whole history in one delta, as a node loading everything at once would build it (lazy
    False: through the schema engine, every partition decoded at once: issue 17's reference)."""
    state = ImageState(lazy=lazy)
    for offset, value in enumerate(history):
        state.apply(offset, value)
    return state


class ImageHistories(RuleBasedStateMachine):
    """See the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        COUNTS["histories"] += 1
        self.history: list[bytes] = []
        self.pending: list[bytes] = []
        self.incremental = ImageState()
        self.stepped = ImageState()
        self.restarted: ImageState | None = None
        self.brokers: dict[int, tuple[int, bool]] = {}  # id -> (broker epoch, fenced)
        self.epochs: dict[int, int] = {}  # id -> last epoch used, registrations and unregistrations alike
        self.topics: dict[str, tuple[uuid.UUID, int]] = {}  # name -> (id, partition count)
        self.removed: list[uuid.UUID] = []
        self.counter = 0  # the KIP-232 topic epoch counter
        self.ids = 0

    # -- brokers -------------------------------------------------------------------------------------

    @rule(broker=BROKER_IDS, rack=st.sampled_from([None, "r1"]))
    def register(self, broker: int, rack: str | None) -> None:
        epoch = self.epochs[broker] = self.epochs.get(broker, 0) + 1
        self.brokers[broker] = (epoch, True)
        self.pending.append(
            _record(
                mr.RegisterBrokerRecord(
                    version=0,
                    broker_id=broker,
                    incarnation_id=uuid.UUID(int=broker * 1000 + epoch),
                    broker_epoch=epoch,
                    end_points=[
                        mr.RegisterBrokerRecord.BrokerEndpoint(
                            name="PLAINTEXT", host="127.0.0.1", port=9000 + broker, security_protocol=0
                        )
                    ],
                    features=[],
                    rack=rack,
                    fenced=True,
                )
            )
        )

    @rule(broker=BROKER_IDS, fenced=st.booleans(), stale=st.booleans())
    def fence_or_unfence(self, broker: int, fenced: bool, stale: bool) -> None:
        epoch, _ = self.brokers.get(broker, (self.epochs.get(broker, 0), True))
        if stale:
            epoch -= 1  # the record names an older registration: ignored
        elif broker in self.brokers:
            self.brokers[broker] = (epoch, fenced)
        kind = mr.FenceBrokerRecord if fenced else mr.UnfenceBrokerRecord
        self.pending.append(_record(kind(version=0, id=broker, epoch=epoch)))

    @rule(broker=BROKER_IDS)
    def unregister(self, broker: int) -> None:
        epoch, _ = self.brokers.pop(broker, (self.epochs.get(broker, 0), True))
        self.pending.append(_record(mr.UnregisterBrokerRecord(version=0, broker_id=broker, broker_epoch=epoch)))

    # -- topics and partitions -----------------------------------------------------------------------

    def _partition(self, topic_id: uuid.UUID, index: int, replicas: list[int]) -> bytes:
        return _record(
            mr.PartitionRecord(
                version=0,
                partition_id=index,
                topic_id=topic_id,
                replicas=replicas,
                isr=replicas,
                removing_replicas=[],
                adding_replicas=[],
                leader=replicas[0],
                leader_epoch=0,
                partition_epoch=0,
            )
        )

    @rule(name=NAMES, count=st.integers(1, 3), replicas=st.lists(BROKER_IDS, min_size=1, max_size=3, unique=True))
    def create_topic(self, name: str, count: int, replicas: list[int]) -> None:
        if name in self.topics:
            return  # the controller answers TOPIC_ALREADY_EXISTS and writes nothing
        self.ids += 1
        self.counter += 1
        topic_id = uuid.UUID(int=0xABC000 + self.ids)
        self.topics[name] = (topic_id, count)
        self.pending.append(_record(mr.TopicRecord(version=0, name=name, topic_id=topic_id, topic_epoch=self.counter)))
        self.pending.extend(self._partition(topic_id, index, replicas) for index in range(count))

    @rule(name=NAMES)
    def delete_topic(self, name: str) -> None:
        if name not in self.topics:
            return
        topic_id, _ = self.topics.pop(name)
        self.removed.append(topic_id)
        self.counter += 1
        self.pending.append(_record(mr.RemoveTopicRecord(version=0, topic_id=topic_id, topic_epoch=self.counter)))

    @rule(name=NAMES, more=st.integers(1, 2), replicas=st.lists(BROKER_IDS, min_size=1, max_size=3, unique=True))
    def add_partitions(self, name: str, more: int, replicas: list[int]) -> None:
        if name not in self.topics:
            return
        topic_id, count = self.topics[name]
        self.topics[name] = (topic_id, count + more)
        self.counter += 1
        self.pending.append(_record(mr.TopicRecord(version=0, name=name, topic_id=topic_id, topic_epoch=self.counter)))
        self.pending.extend(self._partition(topic_id, index, replicas) for index in range(count, count + more))

    @rule(
        name=NAMES,
        index=st.integers(0, 4),
        leader=st.integers(-2, 4),
        isr=st.none() | st.lists(BROKER_IDS, max_size=3, unique=True),
        stale=st.booleans(),
    )
    def change_partition(self, name: str, index: int, leader: int, isr: list[int] | None, stale: bool) -> None:
        if stale and self.removed:
            topic_id = self.removed[-1]  # a change to a deleted topic: ignored
        elif name in self.topics:
            topic_id = self.topics[name][0]
        else:
            return
        self.pending.append(
            _record(mr.PartitionChangeRecord(version=0, partition_id=index, topic_id=topic_id, leader=leader, isr=isr))
        )

    # -- configs and features ------------------------------------------------------------------------

    @rule(
        topic=st.booleans(),
        resource=NAMES | st.sampled_from(["1", "2", ""]),
        name=st.sampled_from(["x", "y"]),
        value=st.none() | st.sampled_from(["1", "2"]),
    )
    def config(self, topic: bool, resource: str, name: str, value: str | None) -> None:
        self.pending.append(
            _record(
                mr.ConfigRecord(
                    version=0, resource_type=TOPIC if topic else BROKER, resource_name=resource, name=name, value=value
                )
            )
        )

    @rule(name=st.sampled_from(["metadata.version", "kraft.version"]), level=st.integers(0, 3))
    def feature(self, name: str, level: int) -> None:
        self.pending.append(_record(mr.FeatureLevelRecord(version=0, name=name, feature_level=level)))

    # -- committing, snapshots -----------------------------------------------------------------------

    @precondition(lambda self: self.pending)
    @rule(reads=st.sets(st.integers(0, 20), max_size=3))
    def commit(self, reads: set[int]) -> None:
        """The open batch is committed and replayed; the incremental state's image is read after
        the records at the positions in `reads` (a reader between records)."""
        base = len(self.history)
        for position, value in enumerate(self.pending):
            offset = base + position
            self.incremental.apply(offset, value)
            if position in reads:
                _ = self.incremental.image
            self.stepped.apply(offset, value)
            _ = self.stepped.image
            if self.restarted is not None:
                self.restarted.apply(offset, value)
        self.history.extend(self.pending)
        COUNTS["records"] += len(self.pending)
        COUNTS["commits"] += 1
        self.pending = []

    @precondition(lambda self: self.history and not self.pending)
    @rule()
    def snapshot(self) -> None:
        """A snapshot of the incremental state; `restarted` loads it and goes on from there."""
        values = list(self.incremental.snapshot_values())
        self.incremental.mark_snapshot()
        self.restarted = ImageState()
        self.restarted.load(values, len(self.history) - 1)
        COUNTS["snapshots"] += 1

    @invariant()
    def every_path_gives_the_same_image(self) -> None:
        if self.pending:
            return  # the open batch is in no state yet
        expected = replayed(self.history)
        image = replayed(self.history, lazy=False).image
        for label, state in (
            ("incremental", self.incremental),
            ("stepped", self.stepped),
            ("restarted from the snapshot", self.restarted),
            ("replayed (lazy)", expected),
        ):
            if state is None:
                continue
            difference = image_difference(state.image, image)
            assert difference is None, f"{label} != replayed after {len(self.history)} records: {difference}"
        assert list(self.incremental.snapshot_values()) == list(expected.snapshot_values()), (
            "incremental and replayed states write different snapshots"
        )
