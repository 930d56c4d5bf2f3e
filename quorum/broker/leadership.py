"""The leader's side of replication on a broker: one `IsrTracker` per partition it leads, driven.

The tracker (`quorum.broker.isr`) is sans-IO; this is its shell: it feeds the tracker the image
(leadership, ISR, broker epochs), the leader's appends, the followers' fetches (from the Fetch
handler) and the clock, and carries out what it answers, in order, before the next event:
HighWatermarkAdvanced moves `Partition.advance_high_watermark` and wakes waiting fetches,
ProduceCompleted resolves an acks=all Produce's future, SendAlterPartition goes to the active
controller on the broker's controller channel (the tracker keeps one in flight per partition).

In this cluster an ISR change also bumps the leader epoch (the controller sets Leader with every
ISR change). So an AlterPartition answer that names this broker leader in a higher epoch is
taken at once as "still the leader, in a new epoch", the same as the image that will follow it:
the partition stamps new batches with that epoch from then on, and followers learn it from their
images (they are fenced until then).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping

from quorum.broker import alter_partition_rpc
from quorum.broker.ack_timings import ReplicationTimings
from quorum.broker.background import BackgroundTasks
from quorum.broker.isr import (
    Action,
    AlterPartitionRequest,
    AlterPartitionResponse,
    HighWatermarkAdvanced,
    IsrConfig,
    IsrTracker,
    LeaderAndIsr,
    ProduceCompleted,
    ReplicaRefused,
    SendAlterPartition,
)
from quorum.broker.partition import Partition
from quorum.broker.partition_view import AppendNotifier
from quorum.image.image import MetadataImage, PartitionInfo
from quorum.net.peer_client import PeerClient, PeerUnavailable
from quorum.net.request_times import current_request_times
from quorum.wire.errors import ErrorCode

logger = logging.getLogger(__name__)

DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30_000


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class Leadership:
    """See the module docstring. Runs on the event loop thread; nothing awaits mid-event."""

    def __init__(self, broker_id: int, notifier: AppendNotifier, controller: Callable[[], PeerClient | None],
                 broker_epoch: Callable[[], int], properties: Mapping[str, str] | None = None,
                 clock_ms: Callable[[], int] = monotonic_ms, timings: ReplicationTimings | None = None) -> None:
        """`timings`: where acks=all waits are split into their parts (`quorum.broker.ack_timings`)."""
        props = dict(properties or {})
        self.timings = timings
        self.broker_id = broker_id
        self._notifier = notifier
        self._controller = controller
        self._broker_epoch = broker_epoch
        self._clock_ms = clock_ms
        self._lag_ms = int(props.get("replica.lag.time.max.ms", DEFAULT_REPLICA_LAG_TIME_MAX_MS))
        self._led: dict[Partition, IsrTracker] = {}
        self._registrations: object = None  # the last image's registrations mapping (images share it unchanged)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due_ms: int | None = None
        self._background = BackgroundTasks()

    def manage(self, partition: Partition) -> None:
        """Take over `partition`'s leader high watermark (called for every partition opened)."""
        partition.hw_follows_log_end = False
        partition.append_listener = self._appended

    def tracker(self, partition: Partition) -> IsrTracker | None:
        return self._led.get(partition)

    # -- the image ---------------------------------------------------------------------------

    def apply_image(self, image: MetadataImage, partitions: Iterable[Partition]) -> None:
        """Lead what the image says this broker leads; resign the rest."""
        registrations_changed = image.registrations is not self._registrations
        self._registrations = image.registrations
        epochs = {r.broker_id: r.broker_epoch for r in image.registrations.values()}
        ineligible = {r.broker_id for r in image.registrations.values() if r.fenced or r.in_controlled_shutdown}
        now = self._clock_ms()
        hosted = set()
        for partition in partitions:
            hosted.add(partition)
            info = _info(image, partition)
            if info is None or info.leader != self.broker_id:
                self._resign(partition, now)
                continue
            tracker = self._led.get(partition)
            config = IsrConfig(self.broker_id, self._broker_epoch(), self._lag_ms,
                               partition.config.min_insync_replicas)  # fmt: skip
            new = tracker is None
            if tracker is None:
                tracker = IsrTracker(config, partition.topic_id, partition.partition)
                self._led[partition] = tracker
            elif tracker.config != config:
                tracker.config = config
            if new or registrations_changed:  # broker epochs and eligibility come from the registrations
                self._run(partition, tracker, tracker.update_brokers(epochs, ineligible, now))
            if tracker.is_leader and (info.leader_epoch, info.partition_epoch) <= (
                tracker.leader_epoch, tracker.partition_epoch
            ) and tuple(info.replicas) == tracker.replicas:
                continue  # nothing new for the tracker (or an image older than an AlterPartition answer)
            self._become_leader(partition, tracker, LeaderAndIsr(info.leader_epoch, info.partition_epoch,
                                                                 tuple(info.replicas), tuple(info.isr)), now)
        for partition in [p for p in self._led if p not in hosted]:
            self._resign(partition, now)
        self._reschedule()

    def _become_leader(self, partition: Partition, tracker: IsrTracker, state: LeaderAndIsr, now: int) -> None:
        if state.leader_epoch < tracker.leader_epoch:
            return
        partition.update_state(self.broker_id, state.leader_epoch, state.isr)
        self._run(partition, tracker, tracker.become_leader(state, partition.log_end_offset,
                                                            partition.high_watermark, now))

    def _resign(self, partition: Partition, now: int) -> None:
        tracker = self._led.pop(partition, None)
        if self.timings is not None:
            self.timings.forget(partition)
        if tracker is not None and tracker.is_leader:
            self._run(partition, tracker, tracker.resign(now))

    # -- events from the broker --------------------------------------------------------------

    def check_append(self, partition: Partition, acks: int) -> int:
        """NONE to append, or why not (NOT_ENOUGH_REPLICAS under min.insync.replicas for acks=all)."""
        tracker = self._led.get(partition)
        if tracker is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return tracker.check_append(acks)

    def await_replication(self, partition: Partition, required_offset: int, timeout_ms: int) -> asyncio.Future[int]:
        """A future of the acks=all answer's error code for an append ending at `required_offset`."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        tracker = self._led.get(partition)
        if tracker is None:
            future.set_result(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return future
        now = self._clock_ms()
        if self.timings is not None:
            self.timings.wait_started(future)
        self._run(partition, tracker, tracker.await_replication(future, required_offset, now + timeout_ms, now))
        self._reschedule_for(tracker)  # its produce timeout; scanning every tracker cost each acks=all produce O(led)
        return future

    def follower_fetched(self, partition: Partition, replica_id: int, fetch_offset: int, log_start_offset: int,
                         broker_epoch: int, leader_log_end: int) -> int:
        """A follower's fetch was served (no error, no DivergingEpoch); NONE, or the error to
        answer instead (NOT_LEADER_OR_FOLLOWER for a non-replica or a stale incarnation)."""
        tracker = self._led.get(partition)
        if tracker is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        try:
            actions = tracker.on_follower_fetch(replica_id, fetch_offset, log_start_offset, broker_epoch,
                                                leader_log_end, self._clock_ms())  # fmt: skip
        except ReplicaRefused as exc:
            logger.info("%s: fetch from broker %d refused: %s", partition.name, replica_id, exc)
            return exc.code
        self._run(partition, tracker, actions, acknowledged=self._arrival(replica_id))
        self._reschedule_for(tracker)
        return ErrorCode.NONE

    def _arrival(self, replica_id: int) -> tuple[int, float] | None:
        """(follower, when its fetch being handled was read), for the timings; None without them."""
        if self.timings is None:
            return None
        times = current_request_times()
        return replica_id, times.received if times is not None else time.perf_counter()

    def follower_answered(self, partition: Partition, replica_id: int) -> None:
        """The Fetch handler read records for `replica_id`'s fetch of `partition` (timings only)."""
        if self.timings is not None:
            self.timings.follower_answered(partition, replica_id)

    def _appended(self, partition: Partition) -> None:
        tracker = self._led.get(partition)
        if tracker is not None:
            self._run(partition, tracker, tracker.on_leader_append(partition.log_end_offset, self._clock_ms()))
            self._reschedule_for(tracker)

    # -- carrying out actions ----------------------------------------------------------------

    def _run(self, partition: Partition, tracker: IsrTracker, actions: list[Action],
             acknowledged: tuple[int, float] | None = None) -> None:
        """Carry out `actions`; `acknowledged` is (follower, its fetch's arrival) when a follower's
        fetch brought them, which the timings split a completed acks=all wait at."""
        for action in actions:
            if isinstance(action, HighWatermarkAdvanced):
                if partition.advance_high_watermark(action.high_watermark):
                    self._notifier.appended()
            elif isinstance(action, ProduceCompleted):
                future: asyncio.Future[int] = action.handle
                if self.timings is not None:
                    self.timings.wait_ended(future, partition,
                                            acknowledged if action.error == ErrorCode.NONE else None)
                if not future.done():
                    future.set_result(action.error)
            elif isinstance(action, SendAlterPartition):
                self._background.spawn(self._alter_partition(partition, tracker, action.request))

    async def _alter_partition(self, partition: Partition, tracker: IsrTracker, request: AlterPartitionRequest) -> None:
        peer = self._controller()
        response: AlterPartitionResponse | None = None
        if peer is not None:
            try:
                response = await alter_partition_rpc.send(peer, request, self._broker_epoch())
            except PeerUnavailable as exc:
                logger.info("%s: AlterPartition not answered: %s", partition.name, exc)
        if self._led.get(partition) is not tracker:
            return  # no longer leading: whatever the answer says, the image decides
        now = self._clock_ms()
        if response is None:
            self._run(partition, tracker, tracker.on_alter_partition_failed(request, now))
        elif (response.error == ErrorCode.NONE and response.leader_id == self.broker_id
              and response.leader_epoch > tracker.leader_epoch):
            # The ISR changed and, in this cluster, the leader epoch with it: still ours.
            logger.info("%s: ISR now %s in leader epoch %d (partition epoch %d)", partition.name,
                        list(response.isr), response.leader_epoch, response.partition_epoch)  # fmt: skip
            state = LeaderAndIsr(response.leader_epoch, response.partition_epoch, tracker.replicas,
                                 tuple(response.isr))  # fmt: skip
            self._become_leader(partition, tracker, state, now)
        else:
            self._run(partition, tracker, tracker.on_alter_partition_response(request, response, now))
        self._reschedule()

    # -- the clock ---------------------------------------------------------------------------

    def _reschedule(self) -> None:
        """Arm one timer for the earliest tracker deadline (ISR shrink, retries, produce timeouts)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = self._timer_due_ms = None
        if self._background.closed:
            return
        deadlines = [d for t in self._led.values() if (d := t.next_deadline_ms()) is not None]
        if deadlines:
            self._arm(min(deadlines))

    def _reschedule_for(self, tracker: IsrTracker) -> None:
        """After one tracker's event (a follower's fetch, an append: many a second per partition):
        only an earlier deadline of its own moves the timer. A deadline that went later or away
        leaves the timer early, which is harmless: `_tick` scans every tracker and arms the next.
        Scanning every tracker here made each fetch cost O(partitions led) (issue 17's profile)."""
        if self._background.closed:
            return
        deadline = tracker.next_deadline_ms()
        if deadline is not None and (self._timer_due_ms is None or deadline < self._timer_due_ms):
            if self._timer is not None:
                self._timer.cancel()
            self._arm(deadline)

    def _arm(self, deadline_ms: int) -> None:
        delay_s = max(0, deadline_ms - self._clock_ms()) / 1000
        self._timer_due_ms = deadline_ms
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._tick)

    def _tick(self) -> None:
        self._timer = self._timer_due_ms = None
        now = self._clock_ms()
        for partition, tracker in list(self._led.items()):
            deadline = tracker.next_deadline_ms()
            if deadline is not None and deadline <= now:
                self._run(partition, tracker, tracker.tick(now))
        self._reschedule()

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._background.close()
        for partition in list(self._led):
            self._resign(partition, self._clock_ms())


def _info(image: MetadataImage, partition: Partition) -> PartitionInfo | None:
    topic = image.topics.get(partition.topic)
    if topic is None or topic.topic_id != partition.topic_id:
        return None
    return next((p for p in topic.partitions if p.partition == partition.partition), None)

