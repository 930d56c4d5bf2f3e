"""QuorumController: AlterPartition from partition leaders."""

from __future__ import annotations

import random
import uuid

import pytest

from quorum.controller import ControllerConfig, QuorumController
from quorum.controller.results import INVALID_UPDATE_VERSION
from quorum.wire import metadata_records as mr
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS, decode_body
from tests.controller.fakes import alter_partition_request, brokers, decoded, replay, topic, view

T = topic("t", ((1, 2, 3), (1, 2), 1), ((2, 1, 3), (2, 1, 3), 2), leader_epoch=5, partition_epoch=7)


def controller(**config) -> QuorumController:
    return QuorumController("cluster", ControllerConfig(**config), random.Random(1))


def current(**kw):
    return view(T, registrations=kw.pop("registrations", brokers(1, 2, 3)), **kw)


def test_isr_expansion() -> None:
    result = controller().alter_partition(alter_partition_request(1, 10, T.topic_id, (0, 5, 7, [1, 2, 3])), current())
    (record,) = decoded(result.records)
    assert isinstance(record, mr.PartitionChangeRecord)
    # The ISR changes, so Leader is set too: the leader epoch goes up (issue 5, KIP-631's IsrChangeRecord).
    assert (record.topic_id, record.partition_id, record.isr, record.leader) == (T.topic_id, 0, [1, 2, 3], 1)
    (topic_answer,) = result.response.topics
    assert topic_answer.topic_id == T.topic_id
    (answer,) = topic_answer.partitions
    assert (answer.partition_index, answer.error_code, answer.leader_id, answer.leader_epoch, answer.isr,
            answer.partition_epoch, answer.leader_recovery_state) == (0, 0, 1, 6, [1, 2, 3], 8, 0)
    after = replay(current(), result.records).topics["t"].partitions[0]
    assert (after.leader, after.leader_epoch, after.isr, after.partition_epoch) == (1, 6, (1, 2, 3), 8)


def test_unchanged_isr_answers_the_current_state() -> None:
    result = controller().alter_partition(alter_partition_request(2, 10, T.topic_id, (1, 5, 7, [2, 1, 3])), current())
    assert result.records == ()
    answer = result.response.topics[0].partitions[0]
    assert (answer.error_code, answer.leader_epoch, answer.partition_epoch, answer.isr) == (0, 5, 7, [2, 1, 3])


def test_stale_broker_epoch_refuses_everything() -> None:
    result = controller().alter_partition(alter_partition_request(1, 9, T.topic_id, (0, 5, 7, [1, 2, 3])), current())
    assert result.records == ()
    assert (result.response.error_code, result.response.topics) == (ErrorCode.STALE_BROKER_EPOCH, [])


def test_per_partition_errors() -> None:
    qc = controller()
    result = qc.alter_partition(alter_partition_request(1, 10, T.topic_id, (0, 4, 7, [1, 2, 3]), (1, 5, 7, [1, 2]),
                                                        (9, 5, 7, [1])), current())
    assert [(p.partition_index, p.error_code) for p in result.response.topics[0].partitions] == [
        (0, ErrorCode.FENCED_LEADER_EPOCH), (1, ErrorCode.INVALID_REQUEST), (9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    unknown = qc.alter_partition(alter_partition_request(1, 10, uuid.UUID(int=5), (0, 5, 7, [1])), current())
    assert unknown.response.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    stale_partition_epoch = qc.alter_partition(alter_partition_request(1, 10, T.topic_id, (0, 5, 6, [1, 2, 3])),
                                               current())
    assert stale_partition_epoch.response.topics[0].partitions[0].error_code == 95  # INVALID_UPDATE_VERSION


def test_fenced_member_is_ineligible() -> None:
    result = controller().alter_partition(alter_partition_request(1, 10, T.topic_id, (0, 5, 7, [1, 2, 3])),
                                          current(registrations=brokers(1, 2, 3, fenced=(3,))))
    assert result.records == ()
    assert result.response.topics[0].partitions[0].error_code == ErrorCode.INELIGIBLE_REPLICA


def test_v3_member_broker_epochs_must_match() -> None:
    request = alter_partition_request(1, 10, T.topic_id, (0, 5, 7, [1, 2, 3]), with_epochs={1: 10, 2: 10, 3: 9})
    body = decode_body(APIS[56].request, request.encode(version=3), 0, 3)
    result = controller().alter_partition(body, current())
    assert result.response.topics[0].partitions[0].error_code == ErrorCode.INELIGIBLE_REPLICA
    request = alter_partition_request(1, 10, T.topic_id, (0, 5, 7, [1, 2, 3]), with_epochs={1: 10, 2: -1, 3: 10})
    body = decode_body(APIS[56].request, request.encode(version=3), 0, 3)
    assert controller().alter_partition(body, current()).response.topics[0].partitions[0].error_code == 0


def test_two_changes_of_one_partition_in_one_request() -> None:
    """The second sees the first: its leader epoch is now one behind."""
    request = alter_partition_request(1, 10, T.topic_id, (0, 5, 7, [1, 2, 3]), (0, 5, 7, [1]), (0, 6, 7, [1]))
    result = controller().alter_partition(request, current())
    assert len(result.records) == 1
    assert [p.error_code for p in result.response.topics[0].partitions] == [0, ErrorCode.FENCED_LEADER_EPOCH,
                                                                            INVALID_UPDATE_VERSION]


@pytest.mark.parametrize("version", [2, 3])
def test_response_encodes(version: int) -> None:
    result = controller().alter_partition(alter_partition_request(1, 10, T.topic_id, (0, 5, 7, [1, 2, 3]),
                                                                  (0, 1, 1, [1])), current())
    api = APIS[56]
    assert api.response.decode(result.response.encode(version=version), version=version) is not None
