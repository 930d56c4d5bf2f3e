"""Produce (API 0) and InitProducerId (API 22) handlers over a ReplicaManager.

Produce follows Kafka's KafkaApis/ReplicaManager: each partition is answered on its own (one
bad partition never fails the others), with Kafka's error codes; acks=0 gets no response, acks=1
is answered once the leader appended, acks=all (-1) once the high watermark covers the append,
which with the leader alone in the ISR is at once, and otherwise when the followers have
fetched it (REQUEST_TIMED_OUT after the request's timeout). acks=all also refuses to append
below `min.insync.replicas` (NOT_ENOUGH_REPLICAS). With replication wired in, the leader's ISR
tracker decides both (`quorum.broker.leadership`), and answers NOT_ENOUGH_REPLICAS_AFTER_APPEND
when the ISR shrank below the minimum while the append waited. A NOT_LEADER_OR_FOLLOWER answer carries the
current leader and its endpoint from v10 on (KIP-951), so clients need not refresh metadata.

A connection's Produce requests are pipelined (`PIPELINE_DEPTH`, `quorum.server.listener`): each is
appended as it arrives, in request order, and the answers leave in request order, but an acks=all
request waiting for the followers does not keep the next ones from being read and appended, as
Kafka's muted connection does. What a client sees is Kafka's: the same answers in the same order,
appends in the order sent; only a batch behind an acks=all one is in the log sooner, which the
followers then copy in the same round trip. A request that would be refused before its append (not
led here, under min.insync.replicas) while earlier ones of its connection are unanswered is decided
once they are, as Kafka decides it (`quorum.net.pipeline_place`): refused early, it left a sequence
gap that the next request was refused for, and librdkafka bumps its epoch on that refusal and
writes again records already written (issue 38).

Kafka closes the connection of an acks=0 producer whose batch failed, so that it refreshes its
metadata; the handler interface cannot, so such failures are only logged here.

InitProducerId hands idempotent producers an id from `ReplicaManager.producer_ids` (see
`quorum.broker.producer_ids`: blocks from the controller, KIP-730) with epoch 0; while no block
has come it answers COORDINATOR_LOAD_IN_PROGRESS, which clients retry. Transactions are not
supported: a transactional id is answered with INVALID_REQUEST (a fatal error that names the
problem in the client, where a retriable one would make it retry until its timeout).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from quorum.broker.listener_view import listener_brokers
from quorum.broker.partition import AppendError, AppendResult, Partition
from quorum.broker.producer_ids import ProducerIdsUnavailable
from quorum.broker.replica_manager import ReplicaManager
from quorum.image.image import MetadataImage
from quorum.net.dispatch import Dispatcher, Reply
from quorum.net.pipeline_place import pipeline_place
from quorum.net.request_times import mark_local_complete
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS, Request

if TYPE_CHECKING:
    from quorum.broker.leadership import Leadership

logger = logging.getLogger(__name__)
PIPELINE_DEPTH = 5
"""Produce requests of one connection started and not yet answered, at most: an acks=all one that
waits for the followers no longer holds back the appends of those behind it (issue 37: one at a
time, a replicated partition took one client batch per follower round trip, 0.25x of an
unreplicated one at 10 KiB messages). Five is the most an idempotent producer keeps in flight
(Kafka's max.in.flight.requests.per.connection bound), so each of its batches is appended as
soon as it arrives; a megabyte batch each, it bounds what a connection holds at five megabytes."""
REFUSAL_LOG_INTERVAL_MS = 1000
REFUSAL_LOG_KEYS = 4096
"""(partition, error) pairs remembered for the refusal lines before those quiet for a second are dropped."""

PRODUCE = APIS[0]
INIT_PRODUCER_ID = APIS[22]
_Response = PRODUCE.response
_TopicResponse = _Response.TopicProduceResponse
_PartitionResponse = _TopicResponse.PartitionProduceResponse
_RecordError = _PartitionResponse.BatchIndexAndErrorMessage
_LeaderIdAndEpoch = _PartitionResponse.LeaderIdAndEpoch
_NodeEndpoint = _Response.NodeEndpoint
_ZERO_UUID = uuid.UUID(int=0)


def _now_ms() -> int:
    return int(time.time() * 1000)


class ProduceHandlers:
    """The two handlers, sharing a ReplicaManager and a clock (milliseconds, injectable for tests)."""

    def __init__(self, replicas: ReplicaManager, clock_ms: Callable[[], int] = _now_ms,
                 replication: Leadership | None = None) -> None:
        self.replicas = replicas
        self.clock_ms = clock_ms
        self.replication = replication
        self._refusals: dict[tuple[str, ErrorCode], tuple[int, int]] = {}
        """(partition, error) -> (when it was last logged, refusals since): one line a second each."""

    def _log_refusal(self, partition: str, code: ErrorCode, message: str | None, now_ms: int) -> None:
        """Every refusal is worth knowing when a producer later bumps its epoch (an
        OUT_OF_ORDER_SEQUENCE_NUMBER follows one), but under a fault they come in hundreds a
        second: the first of each kind per partition in a second is logged with how many it stands for."""
        last, since = self._refusals.get((partition, code), (-REFUSAL_LOG_INTERVAL_MS, 0))
        if now_ms - last < REFUSAL_LOG_INTERVAL_MS:
            self._refusals[(partition, code)] = (last, since + 1)
            return
        if len(self._refusals) >= REFUSAL_LOG_KEYS:  # names come from clients (unknown topics too): stay bounded
            self._refusals = {key: seen for key, seen in self._refusals.items()
                              if now_ms - seen[0] < REFUSAL_LOG_INTERVAL_MS}
        self._refusals[(partition, code)] = (now_ms, 0)
        more = f" (and {since} more since the last line)" if since else ""
        logger.info("produce to %s refused (%s)%s%s", partition, code.name, f": {message}" if message else "", more)

    # -- Produce -----------------------------------------------------------------------------

    async def produce(self, request: Request) -> Reply | None:
        body = request.body
        version = request.version
        acks = body.acks
        by_id = version >= 13
        place = pipeline_place()
        async with place.turn:  # decided in request order, as Kafka's muted connection decides them
            # Decided now, a refusal may not be Kafka's (quorum.net.pipeline_place): decided after the
            # earlier ones, or not at all when the connection ends first (Kafka never read this one).
            if (place.earlier_pending and self._refused_before_append(body, by_id)
                    and not await place.earlier_answered()):
                return None
            answers, waits, leaders, appended = self._decide(body, version)
        image = self.replicas.image
        now = self.clock_ms()
        if appended:
            self.replicas.notifier.appended()
        if waits:
            mark_local_complete()  # what follows is the acks=all wait: Kafka's RemoteTimeMs
        if waits and self.replication is not None:
            futures = [self.replication.await_replication(p, o, body.timeout_ms) for p, o, _ in waits]
            for (partition, _, response), code in zip(waits, await asyncio.gather(*futures), strict=True):
                if code != ErrorCode.NONE:
                    message = f"{partition.name}: acks=all not satisfied within {body.timeout_ms} ms"
                    self._fail(response, ErrorCode(code), message)
                    self._log_refusal(partition.name, ErrorCode(code), f"after the append: {message}", now)
        elif waits:
            late = await self.replicas.wait_for_high_watermarks([(p, o) for p, o, _ in waits], body.timeout_ms / 1000)
            for partition, _, response in waits:
                if partition in late:
                    code = ErrorCode.REQUEST_TIMED_OUT if partition.is_leader else ErrorCode.NOT_LEADER_OR_FOLLOWER
                    self._fail(response, code, f"{partition.name}: the high watermark did not reach the append "
                                               f"within {body.timeout_ms} ms")  # fmt: skip
        if acks == 0:
            return None
        topics = [_TopicResponse(topic_id=key, partition_responses=responses) if by_id
                  else _TopicResponse(name=key, partition_responses=responses)
                  for key, responses in answers]  # fmt: skip
        response = _Response(responses=topics, throttle_time_ms=0)
        if leaders and version >= 10 and image is not None:
            response.node_endpoints = [
                _NodeEndpoint(node_id=broker.node_id, host=broker.host, port=broker.port, rack=broker.rack)
                for node_id in sorted(leaders) if (broker := listener_brokers(image).get(node_id)) is not None
            ]
        return Reply(response, version)

    def _decide(self, body: Any, version: int) -> tuple[list[tuple[Any, list[Any]]], list[tuple[Partition, int, Any]],
                                                       set[int], bool]:
        """Each partition's answer, or its append (with the acks=all waits to make): (answers, waits,
        the leaders named in NOT_LEADER_OR_FOLLOWER answers, whether anything new was written)."""
        acks = body.acks
        image = self.replicas.image
        now = self.clock_ms()
        by_id = version >= 13
        answers: list[tuple[Any, list[Any]]] = []  # (topic name or id, partition responses)
        waits: list[tuple[Partition, int, Any]] = []
        leaders: set[int] = set()
        appended = False
        for topic_data in body.topic_data:
            topic_key = topic_data.topic_id if by_id else topic_data.name
            name = self._topic_name(image, topic_key, by_id)
            responses = []
            for data in topic_data.partition_data:
                response = _PartitionResponse(index=data.index, error_code=ErrorCode.NONE, base_offset=-1,
                                              log_append_time_ms=-1, log_start_offset=-1, record_errors=[],
                                              error_message=None)  # fmt: skip
                responses.append(response)
                if acks not in (-1, 0, 1):
                    self._fail(response, ErrorCode.INVALID_REQUIRED_ACKS, f"acks {acks} is not -1, 0 or 1")
                    continue
                partition, code = self._find(image, name, topic_key, data.index, by_id)
                if partition is None:
                    self._fail(response, code, None)
                    self._log_refusal(f"{name}-{data.index}", code, "no replica of it on this broker"
                                      if code == ErrorCode.NOT_LEADER_OR_FOLLOWER else None, now)
                    if code == ErrorCode.NOT_LEADER_OR_FOLLOWER and version >= 10:
                        self._point_at_leader(response, image, name, data.index, leaders)
                    continue
                if acks == -1 and partition.is_leader and self._under_min_isr(partition):
                    message = (f"the ISR {list(partition.isr)} is below min.insync.replicas "
                               f"{partition.config.min_insync_replicas}")  # fmt: skip
                    self._fail(response, ErrorCode.NOT_ENOUGH_REPLICAS, message)
                    self._log_refusal(partition.name, ErrorCode.NOT_ENOUGH_REPLICAS, message, now)
                    continue
                try:
                    result = partition.append_as_leader(data.records, now)
                except AppendError as exc:
                    self._fail(response, exc.code, exc.message, exc.record_errors)
                    self._log_refusal(partition.name, exc.code, exc.message, now)
                    if exc.code == ErrorCode.NOT_LEADER_OR_FOLLOWER and version >= 10:
                        self._point_at_leader(response, image, partition.topic, data.index, leaders)
                    continue
                appended = appended or not result.duplicate
                self._succeed(response, result)
                if acks == -1:
                    waits.append((partition, result.last_offset + 1, response))
            answers.append((topic_key, responses))
        return answers, waits, leaders, appended

    def _refused_before_append(self, body: Any, by_id: bool) -> bool:
        """Whether some partition of the request would be refused before its append, on the state
        now: not led here (or unknown), or under min.insync.replicas for acks=all."""
        if body.acks not in (-1, 0, 1):
            return True
        image = self.replicas.image
        for topic_data in body.topic_data:
            topic_key = topic_data.topic_id if by_id else topic_data.name
            name = self._topic_name(image, topic_key, by_id)
            for data in topic_data.partition_data:
                partition, _ = self._find(image, name, topic_key, data.index, by_id)
                if partition is None or not partition.is_leader:
                    return True
                if body.acks == -1 and self._under_min_isr(partition):
                    return True
        return False

    def _under_min_isr(self, partition: Partition) -> bool:
        if self.replication is not None:
            return self.replication.check_append(partition, -1) == ErrorCode.NOT_ENOUGH_REPLICAS
        return len(partition.isr) < partition.config.min_insync_replicas

    def _topic_name(self, image: MetadataImage | None, key: Any, by_id: bool) -> str | None:
        if not by_id:
            return key
        if image is None or key is None:
            return None
        topic = image.topic_by_id(key)
        return None if topic is None else topic.name

    def _find(self, image: MetadataImage | None, name: str | None, key: Any, index: int,
              by_id: bool) -> tuple[Partition | None, ErrorCode]:
        """The hosted partition, or why there is none: unknown topic or partition, or not here."""
        if name is None:
            return None, ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        topic = image.topics.get(name) if image is not None else None
        if topic is None or not any(info.partition == index for info in topic.partitions):
            return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if topic.is_internal:
            return None, ErrorCode.INVALID_TOPIC_EXCEPTION
        partition = self.replicas.get(name, index)
        if partition is None or partition.topic_id != topic.topic_id:
            if (name, index) in self.replicas.failed:
                return None, ErrorCode.KAFKA_STORAGE_ERROR
            return None, ErrorCode.NOT_LEADER_OR_FOLLOWER
        return partition, ErrorCode.NONE

    @staticmethod
    def _fail(response: Any, code: ErrorCode, message: str | None,
              record_errors: tuple[tuple[int, str], ...] = ()) -> None:
        """The partition's answer for a refused batch; `record_errors` are KIP-467's (index, why),
        which a client uses to fail exactly those records (Produce v8+; older versions drop them)."""
        response.error_code = code
        response.base_offset = -1
        response.log_append_time_ms = -1
        response.log_start_offset = -1
        response.error_message = message
        response.record_errors = [_RecordError(batch_index=index, batch_index_error_message=why)
                                  for index, why in record_errors]

    @staticmethod
    def _succeed(response: Any, result: AppendResult) -> None:
        response.base_offset = result.base_offset
        response.log_append_time_ms = result.log_append_time
        response.log_start_offset = result.log_start_offset

    @staticmethod
    def _point_at_leader(response: Any, image: MetadataImage | None, topic: str | None, index: int,
                         leaders: set[int]) -> None:
        """KIP-951: the current leader, so the client can go there without a metadata round trip."""
        if image is None or topic is None or (info := image.topics.get(topic)) is None:
            return
        for partition in info.partitions:
            if partition.partition == index and partition.leader >= 0:
                response.current_leader = _LeaderIdAndEpoch(leader_id=partition.leader,
                                                             leader_epoch=partition.leader_epoch)  # fmt: skip
                leaders.add(partition.leader)

    # -- InitProducerId ----------------------------------------------------------------------

    async def init_producer_id(self, request: Request) -> Reply:
        body = request.body
        response = INIT_PRODUCER_ID.response(throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=-1,
                                             producer_epoch=-1)  # fmt: skip
        if body.transactional_id is not None:
            logger.info("InitProducerId for transactional id %r refused: transactions are not supported",
                        body.transactional_id)  # fmt: skip
            response.error_code = ErrorCode.INVALID_REQUEST
            return Reply(response, request.version)
        try:
            response.producer_id = await self.replicas.producer_ids.allocate()
            response.producer_epoch = 0
        except ProducerIdsUnavailable:  # logged, with what it waited for
            response.error_code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return Reply(response, request.version)


def register_produce(dispatcher: Dispatcher, replicas: ReplicaManager, clock_ms: Callable[[], int] = _now_ms,
                     replication: Leadership | None = None) -> ProduceHandlers:
    """Serve Produce and InitProducerId from `replicas` on `dispatcher`; acks=all through
    `replication` when given."""
    handlers = ProduceHandlers(replicas, clock_ms, replication)
    dispatcher.register(PRODUCE.key, handlers.produce, pipelined=True, depth=PIPELINE_DEPTH)
    dispatcher.register(INIT_PRODUCER_ID.key, handlers.init_producer_id)
    return handlers
