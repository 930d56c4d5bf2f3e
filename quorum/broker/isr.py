"""The leader's side of partition replication, sans-IO: follower progress, ISR, high watermark, acks=all.

One `IsrTracker` per partition this broker leads, as the replica-tracking half of Kafka's
Partition (Replica.updateFetchStateOrThrow, maybeExpandIsr, maybeShrinkIsr, maybeIncrementLeaderHW,
checkEnoughReplicasReachOffset). Events in (the image made us leader, we appended, a follower
fetched, time passed, AlterPartition answered), actions out (send AlterPartition, the high
watermark moved, a produce waiting for acks=all is done). No clock, socket or lock: `now_ms`
comes with every event and `next_deadline_ms()` says when `tick` has something to do.

The rules, Kafka's:

* A follower's end offset is the fetch offset of its last Fetch that the leader served without a
  DivergingEpoch or an error (only such a position is known to lie on the leader's log). Its
  lastCaughtUpTime is the time of a fetch that reached the leader's log end, or else the time of
  the previous fetch when this one reached the log end as it was then.
* ISR shrink: an ISR follower is out of sync when it is not at the log end and has not caught up
  for `replica.lag.time.max.ms`. ISR expand: a follower whose end offset reached the high
  watermark and the start offset of the leader's epoch (so it holds everything committed,
  including what earlier leaders committed that this one may not know as committed yet). Both
  go to the controller as AlterPartition with the partition epoch, one at a time; the ISR only
  changes when the controller answers (or a newer image says so).
* High watermark: the smallest end offset among the "maximal" ISR (KIP-497: while an expansion
  is in flight the ISR counts the new member; while a shrink is in flight it still counts the old
  ones, so the answer, whichever it is, never finds the high watermark too high), and among
  followers that are caught up and eligible but not in the ISR yet (so a follower can catch up
  without the high watermark running away from it). It never goes down, and with KIP-966 (Kafka
  4) it does not advance while the ISR is smaller than min.insync.replicas.
* acks=all: refused with NOT_ENOUGH_REPLICAS before the append when the ISR is smaller than
  min.insync.replicas (capped at the replication factor, as Kafka 4 does); after the append the
  answer waits until the high watermark passes the batch, and is NOT_ENOUGH_REPLICAS_AFTER_APPEND
  if the ISR shrank below the minimum meanwhile.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Any

from quorum.wire.errors import ErrorCode

logger = logging.getLogger(__name__)

NEVER = -(1 << 62)
"""A time before any other: a follower that never caught up (Kafka uses 0 on a wall clock)."""
UNKNOWN_OFFSET = -1
OPERATION_NOT_ATTEMPTED = ErrorCode.OPERATION_NOT_ATTEMPTED
INVALID_UPDATE_VERSION = ErrorCode.INVALID_UPDATE_VERSION


@dataclass(frozen=True, slots=True)
class IsrConfig:
    broker_id: int
    broker_epoch: int = -1
    """This broker's registration epoch, sent for itself in AlterPartition's NewIsrWithEpochs."""
    replica_lag_time_max_ms: int = 30_000
    min_insync_replicas: int = 1
    hw_requires_min_isr: bool = True
    """KIP-966 (Kafka 4): the high watermark stands still while the ISR is under min.insync.replicas."""
    alter_partition_retry_backoff_ms: int = 100


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """The partition as the metadata image (or an AlterPartition answer) has it."""

    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True, eq=False)
class AlterPartitionRequest:
    topic_id: uuid.UUID
    partition: int
    leader_id: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[tuple[int, int], ...]  # (broker id, broker epoch or -1), KIP-903's NewIsrWithEpochs
    leader_recovery_state: int = 0


@dataclass(frozen=True, slots=True)
class AlterPartitionResponse:
    """The controller's answer for our partition (a top-level error goes in `error` too)."""

    error: int
    leader_id: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    isr: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class SendAlterPartition:
    """Send to the controller; answer with `on_alter_partition_response` or `..._failed`."""

    request: AlterPartitionRequest


@dataclass(frozen=True, slots=True)
class HighWatermarkAdvanced:
    """Records below `high_watermark` are committed: the partition's high watermark moves there."""

    high_watermark: int


@dataclass(frozen=True, slots=True)
class ProduceCompleted:
    """The acks=all append registered as `handle` can be answered with `error`."""

    handle: Any
    error: int


Action = SendAlterPartition | HighWatermarkAdvanced | ProduceCompleted


class ReplicaRefused(Exception):
    """A follower fetch the leader must refuse (`code`: NOT_LEADER_OR_FOLLOWER)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of one follower (Kafka's ReplicaState)."""

    broker_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    last_fetch_leader_log_end: int = UNKNOWN_OFFSET
    last_fetch_ms: int = NEVER
    last_caught_up_ms: int = NEVER
    broker_epoch: int | None = None  # from its last Fetch; None before one in this leadership


@dataclass(slots=True)
class _Proposal:
    """An AlterPartition in flight (Kafka's PendingExpandIsr / PendingShrinkIsr)."""

    request: AlterPartitionRequest
    proposed: tuple[int, ...]
    maximal: frozenset[int]
    retry_at: int | None = None  # waiting to be sent again
    awaiting_image: bool = False  # the controller said our view is stale: only an image moves us on


@dataclass(slots=True)
class _Waiter:
    handle: Any
    required_offset: int
    deadline_ms: int


@dataclass(slots=True)
class _Brokers:
    epochs: Mapping[int, int] | None = None  # registered broker id -> broker epoch; None: not known
    ineligible: Set[int] = field(default_factory=frozenset)  # fenced or in controlled shutdown


class IsrTracker:
    """See the module docstring. Created when the broker first leads the partition."""

    def __init__(self, config: IsrConfig, topic_id: uuid.UUID, partition: int) -> None:
        self.config = config
        self.topic_id = topic_id
        self.partition = partition
        self._leading = False
        self._leader_epoch = -1
        self._partition_epoch = -1
        self._epoch_start_offset = 0
        self._replicas: tuple[int, ...] = ()
        self._isr: tuple[int, ...] = ()
        self._followers: dict[int, ReplicaState] = {}
        self._proposal: _Proposal | None = None
        self._log_end = 0
        self._high_watermark = 0
        self._brokers = _Brokers()
        self._waiters: list[_Waiter] = []
        self._now = NEVER
        self._actions: list[Action] = []

    # -----------------------------------------------------------------------------------------
    # Reading

    @property
    def is_leader(self) -> bool:
        return self._leading

    @property
    def leader_epoch(self) -> int:
        return self._leader_epoch

    @property
    def partition_epoch(self) -> int:
        return self._partition_epoch

    @property
    def replicas(self) -> tuple[int, ...]:
        """The partition's replicas as the last LeaderAndIsr gave them."""
        return self._replicas

    @property
    def isr(self) -> tuple[int, ...]:
        """The committed ISR: the controller's."""
        return self._isr

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self._proposal.maximal if self._proposal is not None else frozenset(self._isr)

    @property
    def pending_isr(self) -> tuple[int, ...] | None:
        """The ISR proposed in the AlterPartition in flight, None when there is none."""
        return self._proposal.proposed if self._proposal is not None else None

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def epoch_start_offset(self) -> int:
        return self._epoch_start_offset

    def replica(self, broker_id: int) -> ReplicaState | None:
        return self._followers.get(broker_id)

    def effective_min_isr(self) -> int:
        """min.insync.replicas, capped at the replication factor (Kafka 4's effectiveMinIsr)."""
        return max(1, min(self.config.min_insync_replicas, len(self._replicas) or 1))

    @property
    def under_min_isr(self) -> bool:
        return len(self._isr) < self.effective_min_isr()

    def next_deadline_ms(self) -> int | None:
        """When `tick` has something to do: a follower's caught-up time running out (ISR shrink,
        or the high watermark no longer waiting for it), an AlterPartition retry, a produce timeout."""
        if not self._leading:
            return None
        times = [w.deadline_ms for w in self._waiters]
        if self._proposal is not None and self._proposal.retry_at is not None:
            times.append(self._proposal.retry_at)
        lag = self.config.replica_lag_time_max_ms
        for replica in self._followers.values():
            if replica.log_end_offset != self._log_end and replica.last_caught_up_ms > NEVER:
                expiry = replica.last_caught_up_ms + lag + 1
                if expiry > self._now:
                    times.append(expiry)
        return min(times) if times else None

    # -----------------------------------------------------------------------------------------
    # Leadership

    def become_leader(self, state: LeaderAndIsr, log_end_offset: int, high_watermark: int,
                      now_ms: int) -> list[Action]:
        """The image has this broker lead the partition (again), or changed its ISR or replicas.

        An image older than our partition epoch is ignored (an AlterPartition answer may have told
        us a newer one). A new leader epoch starts at the log end offset and resets the followers'
        state as Kafka's makeLeader does; any AlterPartition in flight is forgotten (its answer is
        out of date, whatever it says).
        """
        self._begin(now_ms)
        if self._leading and state.partition_epoch < self._partition_epoch:
            return self._finish()
        was_leader = self._leading
        new_epoch = state.leader_epoch > self._leader_epoch or not was_leader
        self._leading = True
        self._replicas = tuple(state.replicas)
        self._isr = tuple(state.isr)
        self._proposal = None
        self._log_end = log_end_offset
        followers = [r for r in state.replicas if r != self.config.broker_id]
        self._followers = {r: self._followers.get(r) or ReplicaState(r) for r in followers}
        if not was_leader:
            self._high_watermark = high_watermark
        if new_epoch:
            self._epoch_start_offset = log_end_offset
            for replica in self._followers.values():
                self._reset(replica, fresh=not was_leader, in_sync=replica.broker_id in self._isr)
            logger.info("%s-%d: leader in epoch %d from offset %d, ISR %s", self.topic_id, self.partition,
                        state.leader_epoch, log_end_offset, list(self._isr))  # fmt: skip
        self._leader_epoch = state.leader_epoch
        self._partition_epoch = state.partition_epoch
        self._maybe_increment_hw()
        self._complete_waiters()
        return self._finish()

    def resign(self, now_ms: int) -> list[Action]:
        """No longer the leader: produces still waiting answer NOT_LEADER_OR_FOLLOWER."""
        self._begin(now_ms)
        self._leading = False
        self._proposal = None
        for waiter in self._waiters:
            self._actions.append(ProduceCompleted(waiter.handle, ErrorCode.NOT_LEADER_OR_FOLLOWER))
        self._waiters = []
        return self._finish()

    def update_brokers(self, epochs: Mapping[int, int], ineligible: Set[int], now_ms: int) -> list[Action]:
        """From the image: every registered broker's epoch, and those that may not join the ISR
        (fenced, or in controlled shutdown). Until called, every replica is eligible."""
        self._begin(now_ms)
        self._brokers = _Brokers(dict(epochs), frozenset(ineligible))
        return self._finish()

    def _reset(self, replica: ReplicaState, fresh: bool, in_sync: bool) -> None:
        """Kafka's Replica.resetReplicaState: an ISR member counts as caught up now (so it is not
        shrunk at once), an outsider as never (so it does not hold the high watermark back)."""
        replica.last_caught_up_ms = self._now if in_sync else NEVER
        if fresh:
            replica.log_end_offset = replica.log_start_offset = UNKNOWN_OFFSET
            replica.last_fetch_leader_log_end = UNKNOWN_OFFSET
            replica.last_fetch_ms = NEVER
            replica.broker_epoch = None
        else:
            replica.last_fetch_leader_log_end = self._epoch_start_offset
            replica.last_fetch_ms = self._now if in_sync else NEVER

    # -----------------------------------------------------------------------------------------
    # Progress

    def on_leader_append(self, log_end_offset: int, now_ms: int) -> list[Action]:
        """The leader appended: with an ISR of itself alone, the high watermark follows."""
        self._begin(now_ms)
        self._log_end = max(self._log_end, log_end_offset)
        self._maybe_increment_hw()
        self._complete_waiters()
        return self._finish()

    def on_follower_fetch(self, replica_id: int, fetch_offset: int, log_start_offset: int, broker_epoch: int,
                          leader_log_end: int, now_ms: int) -> list[Action]:
        """A follower's Fetch was served at `fetch_offset` (no error, no DivergingEpoch);
        `leader_log_end` is the leader's log end offset when it was read.

        Raises ReplicaRefused (NOT_LEADER_OR_FOLLOWER) for a broker that is not a replica, or
        whose broker epoch is older than the one registered (a stale incarnation).
        """
        self._begin(now_ms)
        replica = self._followers.get(replica_id)
        if not self._leading or replica is None:
            raise ReplicaRefused(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                 f"broker {replica_id} is not a follower of partition {self.partition}")
        registered = self._brokers.epochs.get(replica_id) if self._brokers.epochs is not None else None
        if broker_epoch != -1 and registered is not None and registered > broker_epoch:
            raise ReplicaRefused(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                 f"broker {replica_id} fetched with broker epoch {broker_epoch}, registered is "
                                 f"{registered}")  # fmt: skip
        self._log_end = max(self._log_end, leader_log_end)
        previous_end = replica.log_end_offset
        if fetch_offset >= leader_log_end:
            replica.last_caught_up_ms = max(replica.last_caught_up_ms, now_ms)
        elif fetch_offset >= replica.last_fetch_leader_log_end:
            replica.last_caught_up_ms = max(replica.last_caught_up_ms, replica.last_fetch_ms)
        replica.log_start_offset = log_start_offset
        replica.log_end_offset = fetch_offset
        replica.last_fetch_leader_log_end = leader_log_end
        replica.last_fetch_ms = now_ms
        replica.broker_epoch = broker_epoch
        self._maybe_expand(replica)
        if previous_end != fetch_offset:
            self._maybe_increment_hw()
        self._complete_waiters()
        return self._finish()

    def tick(self, now_ms: int) -> list[Action]:
        self._begin(now_ms)
        if self._leading:
            self._maybe_shrink()
            proposal = self._proposal
            if proposal is not None and proposal.retry_at is not None and proposal.retry_at <= self._now:
                proposal.retry_at = None
                self._send(proposal.request)
            self._maybe_increment_hw()  # a caught-up outsider may have stopped counting
            self._complete_waiters()
        return self._finish()

    # -----------------------------------------------------------------------------------------
    # ISR changes

    def _caught_up(self, replica: ReplicaState) -> bool:
        """Kafka's ReplicaState.isCaughtUp."""
        return (replica.log_end_offset == self._log_end
                or self._now - replica.last_caught_up_ms <= self.config.replica_lag_time_max_ms)

    def _eligible(self, replica: ReplicaState) -> bool:
        """Kafka's isReplicaIsrEligible (KRaft): not fenced or shutting down, and its fetches
        come from the incarnation the controller has registered."""
        brokers = self._brokers
        if brokers.epochs is None:
            return True
        registered = brokers.epochs.get(replica.broker_id)
        if registered is None or replica.broker_id in brokers.ineligible or replica.broker_epoch is None:
            return False
        return replica.broker_epoch in (-1, registered)

    def _maybe_expand(self, replica: ReplicaState) -> None:
        if self._proposal is not None or replica.broker_id in self._isr or not self._eligible(replica):
            return
        end = replica.log_end_offset
        if end >= self._high_watermark and end >= self._epoch_start_offset:
            proposed = tuple(sorted({*self._isr, replica.broker_id}))
            logger.info("%s-%d: expanding ISR %s to %s (broker %d at offset %d, high watermark %d)", self.topic_id,
                        self.partition, list(self._isr), list(proposed), replica.broker_id, end,
                        self._high_watermark)  # fmt: skip
            self._propose(proposed, frozenset(proposed))

    def _maybe_shrink(self) -> None:
        if self._proposal is not None:
            return
        out = [r for r in self._isr if r != self.config.broker_id
               and (r not in self._followers or not self._caught_up(self._followers[r]))]  # fmt: skip
        if out:
            proposed = tuple(r for r in self._isr if r not in out)
            logger.info("%s-%d: shrinking ISR %s to %s (out of sync: %s; log end %d, high watermark %d)",
                        self.topic_id, self.partition, list(self._isr), list(proposed), out, self._log_end,
                        self._high_watermark)  # fmt: skip
            self._propose(proposed, frozenset(self._isr))

    def _propose(self, proposed: tuple[int, ...], maximal: frozenset[int]) -> None:
        new_isr = tuple((r, self._broker_epoch_of(r)) for r in proposed)
        request = AlterPartitionRequest(self.topic_id, self.partition, self.config.broker_id, self._leader_epoch,
                                        self._partition_epoch, new_isr)  # fmt: skip
        self._proposal = _Proposal(request, proposed, maximal)
        self._send(request)

    def _broker_epoch_of(self, broker_id: int) -> int:
        if broker_id == self.config.broker_id:
            return self.config.broker_epoch
        replica = self._followers.get(broker_id)
        return replica.broker_epoch if replica is not None and replica.broker_epoch is not None else -1

    def _send(self, request: AlterPartitionRequest) -> None:
        self._actions.append(SendAlterPartition(request))

    def on_alter_partition_response(self, request: AlterPartitionRequest, response: AlterPartitionResponse,
                                    now_ms: int) -> list[Action]:
        """Kafka's handleAlterPartitionUpdate / handleAlterPartitionError."""
        self._begin(now_ms)
        proposal = self._proposal
        if proposal is None or proposal.request is not request or proposal.retry_at is not None:
            return self._finish()  # answered by an image already, or out of date
        error = response.error
        if error == ErrorCode.NONE:
            if response.leader_epoch != self._leader_epoch or response.partition_epoch < self._partition_epoch:
                proposal.awaiting_image = True
                logger.info("%s-%d: ignoring AlterPartition answer %s (leader epoch %d, partition epoch %d)",
                            self.topic_id, self.partition, response, self._leader_epoch,
                            self._partition_epoch)  # fmt: skip
            else:
                self._isr = tuple(response.isr)
                self._partition_epoch = response.partition_epoch
                self._proposal = None
                logger.info("%s-%d: ISR is now %s at partition epoch %d%s", self.topic_id, self.partition,
                            list(self._isr), self._partition_epoch,
                            " (under min ISR)" if self.under_min_isr else "")  # fmt: skip
                self._maybe_increment_hw()
                self._complete_waiters()
        elif error in (OPERATION_NOT_ATTEMPTED, ErrorCode.INELIGIBLE_REPLICA):
            self._proposal = None  # the controller says it did not apply it: back to the committed ISR
            logger.info("%s-%d: AlterPartition to %s refused (%s)", self.topic_id, self.partition,
                        list(proposal.proposed), _error_name(error))  # fmt: skip
        elif error in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.FENCED_LEADER_EPOCH,
                       INVALID_UPDATE_VERSION, ErrorCode.INVALID_REQUEST, ErrorCode.NEW_LEADER_ELECTED):
            proposal.awaiting_image = True  # our state is stale: nothing more until the image moves
            logger.info("%s-%d: AlterPartition answered %s; awaiting the latest metadata", self.topic_id,
                        self.partition, _error_name(error))  # fmt: skip
        else:
            proposal.retry_at = self._now + self.config.alter_partition_retry_backoff_ms
        return self._finish()

    def on_alter_partition_failed(self, request: AlterPartitionRequest, now_ms: int) -> list[Action]:
        """No answer from the controller: send the same proposal again after the backoff."""
        self._begin(now_ms)
        proposal = self._proposal
        if proposal is not None and proposal.request is request and proposal.retry_at is None:
            proposal.retry_at = self._now + self.config.alter_partition_retry_backoff_ms
        return self._finish()

    # -----------------------------------------------------------------------------------------
    # High watermark and acks=all

    def _maybe_increment_hw(self) -> bool:
        """Kafka's maybeIncrementLeaderHW."""
        if not self._leading or (self.config.hw_requires_min_isr and self.under_min_isr):
            return False
        maximal = self.maximal_isr
        new = self._log_end
        for replica in self._followers.values():
            if replica.log_end_offset < new and (
                replica.broker_id in maximal or (self._caught_up(replica) and self._eligible(replica))
            ):
                new = replica.log_end_offset
        if new <= self._high_watermark:
            return False
        self._high_watermark = new
        self._actions.append(HighWatermarkAdvanced(new))
        return True

    def check_append(self, required_acks: int) -> int:
        """The error to refuse a Produce with before appending, NONE to go ahead."""
        if not self._leading:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if required_acks == -1 and self.under_min_isr:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return ErrorCode.NONE

    def check_enough_replicas(self, required_offset: int) -> tuple[bool, int]:
        """Kafka's checkEnoughReplicasReachOffset: (done, error) for an acks=all append that
        needs the high watermark at `required_offset` (its last offset + 1)."""
        if not self._leading:
            return True, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self._high_watermark < required_offset:
            return False, ErrorCode.NONE
        if len(self.maximal_isr) < self.effective_min_isr():
            return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return True, ErrorCode.NONE

    def await_replication(self, handle: Any, required_offset: int, deadline_ms: int, now_ms: int) -> list[Action]:
        """Hold an acks=all answer until `check_enough_replicas` is done (ProduceCompleted), or
        REQUEST_TIMED_OUT at `deadline_ms` (the Produce timeout)."""
        self._begin(now_ms)
        self._waiters.append(_Waiter(handle, required_offset, deadline_ms))
        self._complete_waiters()
        return self._finish()

    def _complete_waiters(self) -> None:
        if not self._waiters:
            return
        waiting = []
        for waiter in self._waiters:
            done, error = self.check_enough_replicas(waiter.required_offset)
            if not done and waiter.deadline_ms <= self._now:
                done, error = True, ErrorCode.REQUEST_TIMED_OUT
            if done:
                self._actions.append(ProduceCompleted(waiter.handle, error))
            else:
                waiting.append(waiter)
        self._waiters = waiting

    # -----------------------------------------------------------------------------------------

    def _begin(self, now_ms: int) -> None:
        self._now = max(self._now, now_ms)
        self._actions = []

    def _finish(self) -> list[Action]:
        actions, self._actions = self._actions, []
        return actions


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
