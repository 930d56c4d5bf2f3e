"""The KRaft controller's brain (KIP-631), sans-IO: requests and time in, metadata records and responses out.

`QuorumController` holds no metadata of its own, only the active controller's soft state (broker
sessions, `BrokerHeartbeatManager`) and the random source for topic ids and replica placement.
Every method takes the view to decide against and returns a `ControllerResult`: the metadata
record frames to append, as one batch, and the response to send once they are committed.

How the caller drives it (the active controller only; elsewhere the caller answers NOT_CONTROLLER):

* Keep a *pending view*: the committed image with every record this controller returned and
  appended, but not yet committed, replayed on top. Pass it to every call, and replay each
  result's records into it as soon as they are appended (before the next call), so that a
  second request sees the first one's topics, leaders and topic epochs. When Raft truncates
  uncommitted records or this node stops being the leader, drop the pending view (rebuild it
  from the committed image) and, on losing leadership, call `deactivate()`.
* `next_offset` (register_broker, heartbeat) is the offset the first record of this result
  will get: the log end offset when the batch is appended right after the call.
* Call `tick(now_ms, view)` at least every `broker.heartbeat.interval.ms`, or when its
  `next_tick_ms` comes: it fences brokers whose session expired, elects leaders uncleanly for
  leaderless partitions of topics where `unclean.leader.election.enable` is (or has just been
  turned) on, and every `leader.imbalance.check.interval.seconds` moves leadership back to
  preferred replicas (`quorum.controller.balance`).

Unclean leader election (off by default): a partition left without a live ISR member gets the
first live replica outside the ISR as leader when the topic's `unclean.leader.election.enable`
is true (topic config, else the cluster-wide dynamic broker default, else this controller's
static setting), at fencing, unfencing, AlterPartition and every tick, as Kafka's controller
does (Kafka re-checks leaderless partitions every `unclean.leader.election.interval.ms`, 5
minutes; the tick does it at once, which costs one pass over the enabled topics). The new
leader's ISR is itself alone and its LeaderRecoveryState RECOVERING (KIP-704, Kafka 3.2+); the
leader's next AlterPartition, which says RECOVERED, ends that.

KIP-232: the cluster-wide topic_epoch (the view's counter; 0 when it is still -1) goes up by one
for each topic created, each topic deleted and each topic that gains partitions, in request
order, and the new value goes into that topic's TopicRecord (a new TopicRecord with the same name
and id when partitions are added) or RemoveTopicRecord. The replay rule the image must follow:
the counter is the highest TopicEpoch seen; a TopicRecord for a known topic id only changes the
topic's topic_epoch (its partitions stay); a RemoveTopicRecord drops the topic and its configs.
"""

from __future__ import annotations

import base64
import random
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from quorum.controller import balance, reassignment
from quorum.controller import configs as cfg
from quorum.controller import records as rec
from quorum.controller.election import (
    PartitionChange,
    PartitionState,
    alter_partition,
    elect_leader,
    remove_from_isr,
)
from quorum.controller.heartbeats import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
    BrokerControlState,
    BrokerHeartbeatManager,
)
from quorum.controller.mutation_quota import (
    DEFAULT_QUOTA_WINDOW_NUM,
    DEFAULT_QUOTA_WINDOW_SIZE_S,
    THROTTLED_MESSAGE,
    UNBOUNDED,
    MutationQuota,
)
from quorum.controller.placement import place_replicas
from quorum.controller.results import ApiError, ControllerResult
from quorum.controller.short_logs import ShortLocalLogs
from quorum.controller.validation import (
    DEFAULT_NUM_PARTITIONS,
    DEFAULT_REPLICATION_FACTOR,
    CollisionIndex,
    check_new_topic_name,
    check_partition_increase,
    duplicate_topic,
    has_collision_chars,
    manual_new_partitions,
    manual_topic_assignment,
    resolve_counts,
    unify_collision_chars,
    unknown_topic,
)
from quorum.controller.view import ControllerView, PartitionView, RegistrationView, TopicView
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS

CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS, ALTER_CONFIGS, CREATE_PARTITIONS = 19, 20, 32, 33, 37
INCREMENTAL_ALTER_CONFIGS, ALTER_PARTITION, BROKER_REGISTRATION, BROKER_HEARTBEAT = 44, 56, 62, 63

_ZERO_UUID = uuid.UUID(int=0)
_METADATA_TOPIC_ID = uuid.UUID(int=1)


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """The controller's settings, with Kafka's config names and defaults."""

    default_num_partitions: int = DEFAULT_NUM_PARTITIONS
    """`num.partitions`: partitions of a topic created with NumPartitions -1."""
    default_replication_factor: int = DEFAULT_REPLICATION_FACTOR
    """`default.replication.factor`: replicas of a topic created with ReplicationFactor -1."""
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    """`broker.session.timeout.ms`."""
    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS
    """`broker.heartbeat.interval.ms`."""
    unclean_leader_election_enable: bool = False
    """`unclean.leader.election.enable` (static): the default under topic and cluster-wide configs."""
    auto_leader_rebalance_enable: bool = True
    """`auto.leader.rebalance.enable`."""
    leader_imbalance_check_interval_ms: int = balance.DEFAULT_CHECK_INTERVAL_MS
    """`leader.imbalance.check.interval.seconds`, in milliseconds so that tests can make it short."""
    leader_imbalance_per_broker_percentage: int = balance.DEFAULT_IMBALANCE_PERCENTAGE
    """`leader.imbalance.per.broker.percentage`."""
    controller_mutation_rate: float | None = None
    """KIP-599's `controller_mutation_rate` for every (principal, client id): partitions created or deleted a
    second (`quorum.controller.mutation_quota`); None, no quota."""
    quota_window_num: int = DEFAULT_QUOTA_WINDOW_NUM
    """`quota.window.num`."""
    quota_window_size_s: int = DEFAULT_QUOTA_WINDOW_SIZE_S
    """`quota.window.size.seconds`."""

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> ControllerConfig:
        """From a node's properties (Kafka names); missing keys keep Kafka's defaults."""
        def number(name: str, default: int) -> int:
            return int(properties[name]) if name in properties else default

        def flag(name: str, default: bool) -> bool:
            return properties[name].strip().lower() == "true" if name in properties else default
        interval_s = number("leader.imbalance.check.interval.seconds", balance.DEFAULT_CHECK_INTERVAL_MS // 1000)
        rate = properties.get("controller_mutation_rate")
        return cls(default_num_partitions=number("num.partitions", DEFAULT_NUM_PARTITIONS),
                   default_replication_factor=number("default.replication.factor", DEFAULT_REPLICATION_FACTOR),
                   session_timeout_ms=number("broker.session.timeout.ms", DEFAULT_SESSION_TIMEOUT_MS),
                   heartbeat_interval_ms=number("broker.heartbeat.interval.ms", DEFAULT_HEARTBEAT_INTERVAL_MS),
                   unclean_leader_election_enable=flag("unclean.leader.election.enable", False),
                   auto_leader_rebalance_enable=flag("auto.leader.rebalance.enable", True),
                   leader_imbalance_check_interval_ms=interval_s * 1000,
                   leader_imbalance_per_broker_percentage=number("leader.imbalance.per.broker.percentage",
                                                                 balance.DEFAULT_IMBALANCE_PERCENTAGE),
                   controller_mutation_rate=None if rate is None else _rate(rate),
                   quota_window_num=number("quota.window.num", DEFAULT_QUOTA_WINDOW_NUM),
                   quota_window_size_s=number("quota.window.size.seconds", DEFAULT_QUOTA_WINDOW_SIZE_S))

    def broker_defaults(self) -> dict[str, str]:
        """The values DescribeConfigs shows for these keys of a broker when nothing overrides them."""
        return {"num.partitions": str(self.default_num_partitions),
                "default.replication.factor": str(self.default_replication_factor),
                "broker.session.timeout.ms": str(self.session_timeout_ms),
                "broker.heartbeat.interval.ms": str(self.heartbeat_interval_ms),
                "unclean.leader.election.enable": str(self.unclean_leader_election_enable).lower(),
                "auto.leader.rebalance.enable": str(self.auto_leader_rebalance_enable).lower(),
                "leader.imbalance.check.interval.seconds": str(max(1, self.leader_imbalance_check_interval_ms // 1000)),
                "leader.imbalance.per.broker.percentage": str(self.leader_imbalance_per_broker_percentage)}


@dataclass(frozen=True, slots=True)
class TickOutcome:
    """What a tick did: the brokers it fenced, the partitions (topic, index) that got a leader from
    outside their ISR and those whose leadership went back to the preferred replica, and when the
    next tick is needed: the next session expiry or imbalance check (None: neither)."""

    fenced: tuple[int, ...]
    next_tick_ms: int | None
    unclean_elections: tuple[tuple[str, int], ...] = ()
    preferred_elections: tuple[tuple[str, int], ...] = ()


class _Partitions:
    """The view's partitions with the changes made earlier in the same result laid over them."""

    def __init__(self, view: ControllerView, short: ShortLocalLogs | None = None) -> None:
        self._view = view
        self._short = short if short else None  # None while no broker reported a short local log
        self._changed: dict[tuple[uuid.UUID, int], PartitionState] = {}
        self.applied: list[PartitionChange] = []

    def _state(self, topic_id: uuid.UUID, partition: PartitionView) -> PartitionState:
        short = self._short.replicas(topic_id, partition.partition) if self._short is not None else frozenset()
        return PartitionState.of(topic_id, partition, short)

    def select(self, wanted: Callable[[int, Sequence[int]], bool],
               topics: Iterable[str] | None = None) -> Iterator[PartitionState]:
        """Every partition (of `topics`, default all) for which wanted(leader, isr) holds."""
        changed = self._changed
        every = self._view.topics
        for topic in every.values() if topics is None else (every[name] for name in topics if name in every):
            for partition in topic.partitions:
                state = changed.get((topic.topic_id, partition.partition)) if changed else None
                if state is None:
                    if wanted(partition.leader, partition.isr):
                        yield self._state(topic.topic_id, partition)
                elif wanted(state.leader, state.isr):
                    yield state

    def get(self, topic: TopicView, index: int) -> PartitionState | None:
        state = self._changed.get((topic.topic_id, index))
        if state is not None:
            return state
        found = next((p for p in topic.partitions if p.partition == index), None)
        return None if found is None else self._state(topic.topic_id, found)

    def apply(self, change: PartitionChange) -> None:
        self._changed[change.after.key] = change.after
        self.applied.append(change)

    def named(self, change: PartitionChange) -> tuple[str, int]:
        """(topic name, partition index) of a change, for what a tick reports."""
        topic = self._view.topic_by_id(change.after.topic_id)
        return (topic.name if topic is not None else str(change.after.topic_id)), change.after.partition


class QuorumController:
    """The active controller's decisions: see the module docstring for how to drive it."""

    def __init__(self, cluster_id: str, config: ControllerConfig | None = None,
                 rng: random.Random | None = None) -> None:
        self.cluster_id = cluster_id
        self.config = config or ControllerConfig()
        self.rng = rng if rng is not None else random.Random()
        self.heartbeats = BrokerHeartbeatManager(self.config.session_timeout_ms, self.config.heartbeat_interval_ms)
        self.balancer = balance.LeaderBalancer(self.config.auto_leader_rebalance_enable,
                                               self.config.leader_imbalance_check_interval_ms)
        self.short_logs = ShortLocalLogs()
        """Which replicas' local logs are short, as each broker's last heartbeat said (soft state)."""

    def deactivate(self) -> None:
        """This node is no longer the active controller: its soft state goes."""
        self.heartbeats.clear()
        self.balancer.clear()
        self.short_logs.clear()

    def _partitions(self, view: ControllerView) -> _Partitions:
        """The view's partitions, each with its short replicas (`quorum.controller.short_logs`)."""
        return _Partitions(view, self.short_logs)

    # -- brokers -------------------------------------------------------------------------------

    def register_broker(self, request: Any, now_ms: int, view: ControllerView, next_offset: int) -> ControllerResult:
        """BrokerRegistration: a fenced registration whose broker epoch is the offset of its record.

        A new incarnation of a registered broker (another process) first loses its ISR
        memberships and leaderships, as Kafka's controller does for an unclean restart; so does
        an unfenced broker registering again, since the new registration is fenced and a fenced
        broker must not lead. A new incarnation is refused (DUPLICATE_BROKER_REGISTRATION) while
        the old one is unfenced and its session is alive.
        """
        response = APIS[BROKER_REGISTRATION].response
        broker = request.broker_id
        if request.cluster_id != self.cluster_id:
            return ControllerResult((), response(throttle_time_ms=0, error_code=ErrorCode.INCONSISTENT_CLUSTER_ID,
                                                 broker_epoch=-1))
        existing = view.registrations.get(broker)
        if existing is not None and existing.incarnation_id != request.incarnation_id and not existing.fenced:
            self.heartbeats.track(broker, now_ms)
            if self.heartbeats.has_valid_session(broker, now_ms):
                return ControllerResult((), response(throttle_time_ms=0,
                                                     error_code=ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                                                     broker_epoch=-1))
        out: list[Any] = []
        if existing is None or existing.incarnation_id != request.incarnation_id or not existing.fenced:
            out += self._remove_broker_from_partitions(view, broker, self._partitions(view), frozenset())
        epoch = next_offset + len(out)
        out.append(rec.register_broker(
            broker_id=broker, incarnation_id=request.incarnation_id, broker_epoch=epoch,
            endpoints=[(ln.name, ln.host, ln.port, ln.security_protocol) for ln in request.listeners],
            features=[(f.name, f.min_supported_version, f.max_supported_version) for f in request.features],
            rack=request.rack, log_dirs=list(request.log_dirs or ())))
        self.heartbeats.register(broker, now_ms)
        self.short_logs.forget(broker)
        return _result(out, response(throttle_time_ms=0, error_code=0, broker_epoch=epoch))

    def heartbeat(self, request: Any, now_ms: int, view: ControllerView, next_offset: int) -> ControllerResult:
        """BrokerHeartbeat: renew the session, and fence, unfence or shut down the broker as it asks."""
        response = APIS[BROKER_HEARTBEAT].response
        broker = request.broker_id
        registration = view.registrations.get(broker)
        if registration is None or registration.broker_epoch != request.broker_epoch:
            return ControllerResult((), response(throttle_time_ms=0, error_code=ErrorCode.STALE_BROKER_EPOCH,
                                                 is_caught_up=False, is_fenced=True, should_shut_down=False))
        self.heartbeats.track(broker, now_ms)
        self.short_logs.report(broker, ((topic.topic_id, index) for topic in getattr(request, "short_local_logs", ())
                                        or () for index in topic.partitions))
        current = self._control_state(registration)
        offset = request.current_metadata_offset
        state = self.heartbeats.next_state(
            broker, current, want_fence=request.want_fence, want_shut_down=request.want_shut_down,
            metadata_offset=offset, registration_offset=registration.broker_epoch,
            has_leaderships=lambda: any(True for _ in _Partitions(view).select(lambda leader, _: leader == broker)),
            active_broker_ids=lambda: [b for b in view.registrations if b != broker and self._is_active(view, b)])
        out: list[Any] = []
        if state is not current:
            if state.fenced:
                if not registration.fenced:
                    out += self._fence(view, registration, self._partitions(view), frozenset())
            elif state is BrokerControlState.UNFENCED:
                out += self._unfence(view, registration)
            elif state is BrokerControlState.CONTROLLED_SHUTDOWN:
                out += self._remove_broker_from_partitions(view, broker, self._partitions(view), frozenset())
                self.heartbeats.enter_controlled_shutdown(broker, next_offset + len(out) - 1)
        self.heartbeats.touch(broker, now_ms, offset)
        if state.fenced:
            self.heartbeats.leave_controlled_shutdown(broker)
        return _result(out, response(throttle_time_ms=0, error_code=0, is_caught_up=offset >= registration.broker_epoch,
                                     is_fenced=state.fenced, should_shut_down=state.should_shut_down))

    def unregister_broker(self, broker_id: int, view: ControllerView) -> ControllerResult:
        """Remove a registration (Kafka's UnregisterBroker): out of every ISR and leadership first.

        The response is the error code: 0, or BROKER_ID_NOT_REGISTERED.
        """
        registration = view.registrations.get(broker_id)
        if registration is None:
            return ControllerResult((), int(ErrorCode.BROKER_ID_NOT_REGISTERED))
        out = self._remove_broker_from_partitions(view, broker_id, self._partitions(view), frozenset())
        out.append(rec.unregister_broker(broker_id, registration.broker_epoch))
        self.heartbeats.remove(broker_id)
        self.short_logs.forget(broker_id)
        return _result(out, 0)

    def tick(self, now_ms: int, view: ControllerView) -> ControllerResult:
        """Fence every unfenced broker whose session expired (its partitions get new leaders from the
        ISR); elect uncleanly where a topic allows it; move leaders back to preferred replicas when the
        imbalance check is due. All of it in one batch, each step seeing the ones before."""
        unfenced = [broker for broker, registration in view.registrations.items() if not registration.fenced]
        expired = self.heartbeats.expired(unfenced, now_ms)
        partitions = self._partitions(view)
        fenced = frozenset(expired)  # none of them may be elected while the others are fenced
        out: list[Any] = []
        for broker in expired:
            out += self._fence(view, view.registrations[broker], partitions, fenced)
            self.heartbeats.leave_controlled_shutdown(broker)
        acceptable = lambda b: self._is_active(view, b, fenced)  # noqa: E731
        unclean_topics = self._unclean_topics(view)
        if unclean_topics:  # offline partitions of topics whose config allows it (maybe just turned on)
            for state in list(partitions.select(lambda leader, _: leader == rec.NO_LEADER, unclean_topics.values())):
                change = elect_leader(state, is_acceptable_leader=acceptable, unclean=True)
                if change is not None:
                    out.append(change.record)
                    partitions.apply(change)
        unclean = [partitions.named(change) for change in partitions.applied if change.unclean]
        preferred: list[tuple[str, int]] = []
        if self.balancer.due(now_ms):
            changes, more = balance.plan(partitions.select(lambda _, __: True),
                                         percentage=self.config.leader_imbalance_per_broker_percentage,
                                         is_acceptable_leader=acceptable)
            for change in changes:
                out.append(change.record)
                partitions.apply(change)
                preferred.append(partitions.named(change))
            self.balancer.checked(now_ms, more)
        remaining = [broker for broker in unfenced if broker not in fenced]
        deadlines = [t for t in (self.heartbeats.next_expiry_ms(remaining), self.balancer.next_check_ms)
                     if t is not None]
        return _result(out, TickOutcome(tuple(expired), min(deadlines) if deadlines else None, tuple(unclean),
                                        tuple(preferred)))

    # -- topics --------------------------------------------------------------------------------

    def create_topics(self, request: Any, view: ControllerView, quota: MutationQuota = UNBOUNDED) -> ControllerResult:
        """CreateTopics: TopicRecord (with its topic epoch), ConfigRecords, PartitionRecords per topic; each
        topic's partitions taken from the client's mutation quota (KIP-599) once it is otherwise valid."""
        schema = APIS[CREATE_TOPICS].response
        result, config_entry = schema.CreatableTopicResult, schema.CreatableTopicResult.CreatableTopicConfigs
        unified = CollisionIndex(view.topics)
        registered = view.registrations.keys()
        usable = self._usable_brokers(view)
        epoch = _epoch(view)
        taken: set[uuid.UUID] = set()
        out: list[Any] = []
        results = []
        for topic, duplicated in _each_name_once(request.topics):
            name = topic.name
            try:
                if duplicated:
                    raise duplicate_topic()
                check_new_topic_name(name, view.topics, unified)
                configs = cfg.check_topic_configs((c.name, c.value) for c in topic.configs)
                if topic.assignments:
                    placed = manual_topic_assignment(
                        topic.num_partitions, topic.replication_factor,
                        ((a.partition_index, a.broker_ids) for a in topic.assignments),
                        registered=registered, is_usable=lambda b: self._is_active(view, b))
                else:
                    count, factor = resolve_counts(
                        topic.num_partitions, topic.replication_factor,
                        default_num_partitions=self.config.default_num_partitions,
                        default_replication_factor=self.config.default_replication_factor)
                    if len(out) + 1 + len(configs) + count > MAX_RECORDS_PER_USER_OP:
                        return _excessive(schema, [t.name for t in request.topics])
                    placed = [(replicas, replicas) for replicas in place_replicas(usable, count, factor, self.rng)]
            except ApiError as error:
                results.append(result(name=name, topic_id=None, error_code=error.code, error_message=error.message,
                                      num_partitions=-1, replication_factor=-1, configs=None))
                continue
            if not quota.try_take(len(placed)):
                results.append(result(name=name, topic_id=None, error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                                      error_message=THROTTLED_MESSAGE, num_partitions=-1, replication_factor=-1,
                                      configs=None))
                continue
            if has_collision_chars(name):
                unified.setdefault(unify_collision_chars(name), name)
            topic_id = None
            if not request.validate_only:
                topic_id = self._new_topic_id(view, taken)
                epoch += 1
                out.append(rec.topic(name, topic_id, epoch))
                out += [rec.config(cfg.TOPIC, name, key, value) for key, value in configs.items()]
                out += [rec.partition(topic_id, index, replicas, isr) for index, (replicas, isr) in enumerate(placed)]
            described = cfg.describe(cfg.TOPIC, name, None, {(cfg.TOPIC, name): configs})
            results.append(result(
                name=name, topic_id=topic_id, error_code=0, error_message=None, num_partitions=len(placed),
                replication_factor=len(placed[0][0]),
                configs=[config_entry(name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                                      is_sensitive=e.is_sensitive) for e in described]))
        return _result(out, schema(throttle_time_ms=quota.throttle_time_ms(), topics=results))

    def delete_topics(self, request: Any, view: ControllerView, quota: MutationQuota = UNBOUNDED) -> ControllerResult:
        """DeleteTopics by name (v1-5, and v6 entries with a name) or by id (v6): a RemoveTopicRecord each, its
        partitions taken from the client's mutation quota (KIP-599)."""
        schema = APIS[DELETE_TOPICS].response
        result = schema.DeletableTopicResult
        asked: list[tuple[str | None, uuid.UUID | None]] = [(name, None) for name in request.topic_names or ()]
        asked += [(t.name, None if t.topic_id in (None, _ZERO_UUID) else t.topic_id) for t in request.topics or ()]
        names = Counter(name for name, topic_id in asked if name is not None and topic_id is None)
        ids = Counter(topic_id for name, topic_id in asked if name is None and topic_id is not None)
        epoch = _epoch(view)
        deleted: set[uuid.UUID] = set()
        reported: set[tuple[str | None, uuid.UUID | None]] = set()
        out: list[Any] = []
        results = []
        for name, topic_id in asked:
            if (name, topic_id) in reported:
                continue
            reported.add((name, topic_id))
            try:
                topic = self._topic_to_delete(view, name, topic_id, names, ids)
                if topic.topic_id in deleted:
                    raise ApiError(ErrorCode.INVALID_REQUEST, "Duplicate topic id.")
                if not quota.try_take(len(topic.partitions)):
                    raise ApiError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLED_MESSAGE)
            except ApiError as error:
                results.append(result(name=name, topic_id=topic_id or _ZERO_UUID, error_code=error.code,
                                      error_message=error.message))
                continue
            deleted.add(topic.topic_id)
            epoch += 1
            out.append(rec.remove_topic(topic.topic_id, epoch))
            results.append(result(name=topic.name, topic_id=topic.topic_id, error_code=0, error_message=None))
        return _result(out, schema(throttle_time_ms=quota.throttle_time_ms(), responses=results))

    @staticmethod
    def _topic_to_delete(view: ControllerView, name: str | None, topic_id: uuid.UUID | None,
                         names: Counter[str], ids: Counter[uuid.UUID]) -> TopicView:
        if name is not None and topic_id is not None:
            raise ApiError(ErrorCode.INVALID_REQUEST, "You may not specify both a topic name and a topic ID.")
        if name is not None:
            if names[name] > 1:
                raise duplicate_topic()
            topic = view.topics.get(name)
            if topic is None:
                raise unknown_topic(name)
            return topic
        if topic_id is None:
            raise ApiError(ErrorCode.INVALID_REQUEST, "Neither a topic name nor a topic ID was given.")
        if ids[topic_id] > 1:
            raise ApiError(ErrorCode.INVALID_REQUEST, "Duplicate topic id.")
        found = view.topic_by_id(topic_id)
        if found is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_ID, f"The topic id {topic_id} does not exist.")
        return found

    def create_partitions(self, request: Any, view: ControllerView,
                          quota: MutationQuota = UNBOUNDED) -> ControllerResult:
        """CreatePartitions: the topic's TopicRecord again with a new topic epoch, then the new PartitionRecords;
        the new partitions taken from the client's mutation quota (KIP-599)."""
        schema = APIS[CREATE_PARTITIONS].response
        result = schema.CreatePartitionsTopicResult
        registered = view.registrations.keys()
        usable = self._usable_brokers(view)
        epoch = _epoch(view)
        out: list[Any] = []
        results = []
        for asked, duplicated in _each_name_once(request.topics):
            name = asked.name
            try:
                if duplicated:
                    raise duplicate_topic()
                topic = view.topics.get(name)
                if topic is None:
                    raise unknown_topic(name)
                start = len(topic.partitions)
                check_partition_increase(name, start, asked.count)
                factor = len(min(topic.partitions, key=lambda p: p.partition).replicas) if topic.partitions else 1
                if asked.assignments is not None:
                    placed = manual_new_partitions(
                        start, asked.count, factor, [a.broker_ids for a in asked.assignments],
                        registered=registered, is_usable=lambda b: self._is_active(view, b))
                else:
                    if len(out) + 1 + asked.count - start > MAX_RECORDS_PER_USER_OP:
                        return _excessive(schema, [t.name for t in request.topics])
                    placed = [(r, r) for r in place_replicas(usable, asked.count - start, factor, self.rng)]
                if not quota.try_take(len(placed)):
                    raise ApiError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLED_MESSAGE)
            except ApiError as error:
                results.append(result(name=name, error_code=error.code, error_message=error.message))
                continue
            if not request.validate_only:
                epoch += 1
                out.append(rec.topic(topic.name, topic.topic_id, epoch))
                out += [rec.partition(topic.topic_id, start + offset, replicas, isr)
                        for offset, (replicas, isr) in enumerate(placed)]
            results.append(result(name=name, error_code=0, error_message=None))
        return _result(out, schema(throttle_time_ms=quota.throttle_time_ms(), results=results))

    # -- configs -------------------------------------------------------------------------------

    def incremental_alter_configs(self, request: Any, view: ControllerView) -> ControllerResult:
        """IncrementalAlterConfigs for TOPIC and BROKER resources: a ConfigRecord per key that changes."""
        def changes(resource: Any, current: Mapping[str, str]) -> list[tuple[str, str | None]]:
            cfg.check_resource(resource.resource_type, resource.resource_name, resource.resource_name in view.topics)
            return cfg.alter(resource.resource_type, [(c.name, c.config_operation, c.value) for c in resource.configs],
                             current)

        return self._alter_configs(APIS[INCREMENTAL_ALTER_CONFIGS].response, request, view, changes)

    def legacy_alter_configs(self, request: Any, view: ControllerView) -> ControllerResult:
        """AlterConfigs (API 33, deprecated in Kafka, still served): each TOPIC or BROKER resource's named
        configs become its whole set of dynamic configs, the others are deleted (`configs.replace`)."""
        def changes(resource: Any, current: Mapping[str, str]) -> list[tuple[str, str | None]]:
            cfg.check_legacy_resource_type(resource.resource_type)
            cfg.check_resource(resource.resource_type, resource.resource_name, resource.resource_name in view.topics)
            return cfg.replace(resource.resource_type, [(c.name, c.value) for c in resource.configs], current)

        return self._alter_configs(APIS[ALTER_CONFIGS].response, request, view, changes)

    @staticmethod
    def _alter_configs(schema: Any, request: Any, view: ControllerView,
                       changes: Callable[[Any, Mapping[str, str]], list[tuple[str, str | None]]]) -> ControllerResult:
        """What both AlterConfigs APIs do with the (key, value or None) changes they decide per resource
        (`changes` raises ApiError to refuse one): a resource named twice is refused both times, a refused
        resource writes nothing, the others write a ConfigRecord per change unless ValidateOnly; one answer
        per resource (the two responses have the same shape)."""
        result = schema.AlterConfigsResourceResponse
        counts = Counter((r.resource_type, r.resource_name) for r in request.resources)
        out: list[Any] = []
        results = []
        for resource in request.resources:
            kind, name = resource.resource_type, resource.resource_name
            try:
                if counts[(kind, name)] > 1:
                    raise ApiError(ErrorCode.INVALID_REQUEST, "Duplicate resource.")
                decided = changes(resource, view.configs.get((kind, name), {}))
            except ApiError as error:
                results.append(result(error_code=error.code, error_message=error.message, resource_type=kind,
                                      resource_name=name))
                continue
            if not request.validate_only:
                out += [rec.config(kind, name, key, value) for key, value in decided]
            results.append(result(error_code=0, error_message=None, resource_type=kind, resource_name=name))
        return _result(out, schema(throttle_time_ms=0, responses=results))

    def describe_configs(self, request: Any, view: ControllerView) -> ControllerResult:
        """DescribeConfigs (read only): the view's configs over Kafka's defaults."""
        schema = APIS[DESCRIBE_CONFIGS].response
        result = schema.DescribeConfigsResult
        entry_schema = result.DescribeConfigsResourceResult
        synonym = entry_schema.DescribeConfigsSynonym
        results = []
        for resource in request.resources:
            kind, name = resource.resource_type, resource.resource_name
            try:
                cfg.check_resource(kind, name, name in view.topics)
            except ApiError as error:
                results.append(result(error_code=error.code, error_message=error.message, resource_type=kind,
                                      resource_name=name, configs=[]))
                continue
            entries = cfg.describe(kind, name, resource.configuration_keys, view.configs,
                                   self.config.broker_defaults())
            configs = [entry_schema(
                name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                is_default=e.source == cfg.ConfigSource.DEFAULT_CONFIG, is_sensitive=e.is_sensitive,
                synonyms=[synonym(name=n, value=v, source=s) for n, v, s in e.synonyms]
                if request.include_synonyms else [],
                config_type=e.config_type, documentation=None) for e in entries]
            results.append(result(error_code=0, error_message=None, resource_type=kind, resource_name=name,
                                  configs=configs))
        return ControllerResult((), schema(throttle_time_ms=0, results=results))

    # -- partitions ----------------------------------------------------------------------------

    def alter_partition(self, request: Any, view: ControllerView) -> ControllerResult:
        """AlterPartition from a partition leader: validated ISR changes become PartitionChangeRecords."""
        schema = APIS[ALTER_PARTITION].response
        topic_data = schema.TopicData
        partition_data = topic_data.PartitionData
        registration = view.registrations.get(request.broker_id)
        if registration is None or registration.broker_epoch != request.broker_epoch:
            return ControllerResult((), schema(throttle_time_ms=0, error_code=ErrorCode.STALE_BROKER_EPOCH,
                                               topics=[]))
        partitions = self._partitions(view)
        unclean_topics = self._unclean_topics(view)
        out: list[Any] = []
        topics = []
        for asked in request.topics:
            topic = view.topic_by_id(asked.topic_id) if asked.topic_id not in (None, _ZERO_UUID) else None
            answers = []
            for part in asked.partitions:
                index = part.partition_index
                if topic is None:
                    answers.append(partition_data(partition_index=index, error_code=ErrorCode.UNKNOWN_TOPIC_ID))
                    continue
                state = partitions.get(topic, index)
                if state is None:
                    answers.append(partition_data(partition_index=index,
                                                  error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                    continue
                with_epochs = getattr(part, "new_isr_with_epochs", None) or []
                new_isr = ([(b.broker_id, b.broker_epoch) for b in with_epochs] if with_epochs
                           else [(b, -1) for b in getattr(part, "new_isr", None) or []])
                try:
                    change = alter_partition(
                        state, broker_id=request.broker_id, leader_epoch=part.leader_epoch,
                        partition_epoch=part.partition_epoch, new_isr=new_isr,
                        leader_recovery_state=part.leader_recovery_state,
                        is_eligible=lambda b, e: self._is_eligible_isr_member(view, b, e),
                        is_acceptable_leader=lambda b: self._is_active(view, b),
                        unclean=topic.topic_id in unclean_topics)
                except ApiError as error:
                    answers.append(partition_data(partition_index=index, error_code=error.code))
                    continue
                if change is not None:
                    out.append(change.record)
                    partitions.apply(change)
                    if change.leader_changed:
                        answers.append(partition_data(partition_index=index,
                                                      error_code=ErrorCode.NEW_LEADER_ELECTED))
                        continue
                after = change.after if change is not None else state
                answers.append(partition_data(partition_index=index, error_code=0, leader_id=after.leader,
                                              leader_epoch=after.leader_epoch, isr=list(after.isr),
                                              leader_recovery_state=after.leader_recovery_state,
                                              partition_epoch=after.partition_epoch))
            topics.append(topic_data(topic_id=asked.topic_id, partitions=answers))
        return _result(out, schema(throttle_time_ms=0, error_code=0, topics=topics))

    def alter_partition_reassignments(self, request: Any, view: ControllerView) -> ControllerResult:
        """AlterPartitionReassignments (KIP-455): see `quorum.controller.reassignment`."""
        out, response = reassignment.alter_partition_reassignments(
            request, view, self._partitions(view), is_acceptable_leader=lambda b: self._is_active(view, b),
            unclean_topics=set(self._unclean_topics(view).values()))
        return _result(out, response)

    def list_partition_reassignments(self, request: Any, view: ControllerView) -> ControllerResult:
        """ListPartitionReassignments (read only): the partitions being reassigned."""
        return ControllerResult((), reassignment.list_partition_reassignments(request, view))

    # -- helpers -------------------------------------------------------------------------------

    def _control_state(self, registration: RegistrationView) -> BrokerControlState:
        if registration.fenced:
            return BrokerControlState.FENCED
        if registration.in_controlled_shutdown or self.heartbeats.in_controlled_shutdown(registration.broker_id):
            return BrokerControlState.CONTROLLED_SHUTDOWN
        return BrokerControlState.UNFENCED

    def _is_active(self, view: ControllerView, broker: int, fenced: frozenset[int] | set[int] = frozenset()) -> bool:
        """Kafka's ClusterControlManager.isActive: registered, unfenced, not in controlled shutdown."""
        registration = view.registrations.get(broker)
        return (registration is not None and not registration.fenced and not registration.in_controlled_shutdown
                and broker not in fenced and not self.heartbeats.in_controlled_shutdown(broker))

    def _is_eligible_isr_member(self, view: ControllerView, broker: int, broker_epoch: int) -> bool:
        registration = view.registrations.get(broker)
        return (self._is_active(view, broker) and registration is not None
                and broker_epoch in (-1, registration.broker_epoch))

    def _unclean_topics(self, view: ControllerView) -> dict[uuid.UUID, str]:
        """The topics (id -> name) whose `unclean.leader.election.enable` is true, Kafka's way."""
        key = "unclean.leader.election.enable"
        fallback = view.configs.get((cfg.BROKER, ""), {}).get(key, str(self.config.unclean_leader_election_enable))
        if _true(fallback):  # every topic but those that turn it off
            return {topic.topic_id: name for name, topic in view.topics.items()
                    if _true(view.configs.get((cfg.TOPIC, name), {}).get(key, fallback))}
        # only topics that turn it on: a pass over the configs, not every topic (ticks run it 10 times a second)
        return {topic.topic_id: name for (kind, name), values in view.configs.items()
                if kind == cfg.TOPIC and _true(values.get(key)) and (topic := view.topics.get(name)) is not None}

    def _usable_brokers(self, view: ControllerView) -> list[int]:
        return [broker for broker in view.registrations if self._is_active(view, broker)]

    def _remove_broker_from_partitions(self, view: ControllerView, broker: int, partitions: _Partitions,
                                       fenced: frozenset[int]) -> list[Any]:
        """Kafka's generateLeaderAndIsrUpdates for a broker going away: out of every ISR (but the last
        member stays) and every leadership; a new leader from the ISR, or from outside it where the
        topic allows unclean election."""
        out = []
        acceptable = lambda b: self._is_active(view, b, fenced)  # noqa: E731
        unclean_topics = self._unclean_topics(view)
        for state in list(partitions.select(lambda leader, isr: leader == broker or broker in isr)):
            change = remove_from_isr(state, broker, is_acceptable_leader=acceptable,
                                     unclean=state.topic_id in unclean_topics)
            if change is not None:
                out.append(change.record)
                partitions.apply(change)
        return out

    def _fence(self, view: ControllerView, registration: RegistrationView, partitions: _Partitions,
               fenced: frozenset[int]) -> list[Any]:
        """Kafka's handleBrokerFenced: the broker's ISR memberships and leaderships go, then FenceBrokerRecord."""
        broker = registration.broker_id
        out = self._remove_broker_from_partitions(view, broker, partitions, fenced | {broker})
        out.append(rec.fence_broker(broker, registration.broker_epoch))
        return out

    def _unfence(self, view: ControllerView, registration: RegistrationView) -> list[Any]:
        """Kafka's handleBrokerUnfenced: UnfenceBrokerRecord, then leaders for leaderless partitions."""
        broker = registration.broker_id
        out = [rec.unfence_broker(broker, registration.broker_epoch)]
        acceptable = lambda b: b == broker or self._is_active(view, b)  # noqa: E731
        unclean_topics = self._unclean_topics(view)
        for state in list(self._partitions(view).select(lambda leader, _: leader == rec.NO_LEADER)):
            change = elect_leader(state, is_acceptable_leader=acceptable, unclean=state.topic_id in unclean_topics)
            if change is not None:
                out.append(change.record)
        return out

    def _new_topic_id(self, view: ControllerView, taken: set[uuid.UUID]) -> uuid.UUID:
        """A random version-4 id, as Kafka's Uuid.randomUuid: never the zero or metadata topic id,
        never one whose base64 form starts with '-' (it would read as a command-line option)."""
        while True:
            topic_id = uuid.UUID(int=self.rng.getrandbits(128), version=4)
            if topic_id in (_ZERO_UUID, _METADATA_TOPIC_ID) or topic_id in taken:
                continue
            if base64.urlsafe_b64encode(topic_id.bytes).startswith(b"-") or view.topic_by_id(topic_id) is not None:
                continue
            taken.add(topic_id)
            return topic_id


def _each_name_once(topics: Iterable[Any]) -> Iterator[tuple[Any, bool]]:
    """Each topic a request names, once, and whether it was named more than once (Kafka answers a
    duplicated name once, with INVALID_REQUEST, and creates nothing for it)."""
    topics = list(topics)
    counts = Counter(topic.name for topic in topics)
    seen: set[str] = set()
    for topic in topics:
        if topic.name not in seen:
            seen.add(topic.name)
            yield topic, counts[topic.name] > 1


def _rate(value: str) -> float:
    """`controller_mutation_rate` as Kafka reads a client quota: a number of partitions a second above 0."""
    try:
        rate = float(value)
    except ValueError:
        raise ValueError(f"controller_mutation_rate must be a number of partitions a second, not {value!r}") from None
    if not rate > 0:
        raise ValueError(f"controller_mutation_rate must be above 0 partitions a second, not {value!r}")
    return rate


def _true(value: str | None) -> bool:
    """A boolean config's value as Kafka reads it."""
    return (value or "").strip().lower() == "true"


def _epoch(view: ControllerView) -> int:
    """The topic_epoch counter the next bump starts from (the first topic ever gets 1)."""
    return max(view.topic_epoch, 0)


def _result(out: list[Any], response: Any) -> ControllerResult:
    return ControllerResult(tuple(rec.encode(record) for record in out), response)


MAX_RECORDS_PER_USER_OP = 10_000
"""Kafka's QuorumController.MAX_RECORDS_PER_USER_OP: the most records one CreateTopics or CreatePartitions
may generate. A request for 2**31 - 1 partitions (the protocol fuzzer sent some) otherwise held the controller
placing them, memory growing, until the broker's session expired."""
_EXCESSIVE = "Unable to perform excessively large batch operation."


def _excessive(schema: Any, names: list[str]) -> ControllerResult:
    """Kafka fails the whole operation with POLICY_VIOLATION (its BoundedListTooLongException): nothing is written."""
    once = list(dict.fromkeys(names))
    if schema is APIS[CREATE_TOPICS].response:
        topics = [schema.CreatableTopicResult(name=name, topic_id=None, error_code=ErrorCode.POLICY_VIOLATION,
                                              error_message=_EXCESSIVE, num_partitions=-1, replication_factor=-1,
                                              configs=None) for name in once]
        return _result([], schema(throttle_time_ms=0, topics=topics))
    results = [schema.CreatePartitionsTopicResult(name=name, error_code=ErrorCode.POLICY_VIOLATION,
                                                  error_message=_EXCESSIVE) for name in once]
    return _result([], schema(throttle_time_ms=0, results=results))


__all__ = ["ControllerConfig", "QuorumController", "TickOutcome"]
