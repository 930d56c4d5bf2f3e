"""The broker's producer ids (KIP-730): blocks from a source, prefetch at 90%, a bounded wait that
InitProducerId answers with COORDINATOR_LOAD_IN_PROGRESS, failing controller calls retried, and
the controller channel's request and its errors."""

from __future__ import annotations

import asyncio
import logging

import pytest

from quorum.broker import producer_ids as pids
from quorum.broker.allocate_producer_ids_rpc import ALLOCATE_PRODUCER_IDS, ControllerBlocks
from quorum.broker.produce import register_produce
from quorum.broker.producer_ids import (
    BlockUnavailable,
    ProducerIdBlock,
    ProducerIdBlocks,
    ProducerIdManager,
    ProducerIdsUnavailable,
)
from quorum.broker.replica_manager import ReplicaManager
from quorum.net.dispatch import Dispatcher
from quorum.net.peer_client import PeerUnavailable
from quorum.wire.errors import ErrorCode
from quorum.wire.framing import RequestHeader
from quorum.wire.protocol import APIS, Request, decode_body

INIT_PRODUCER_ID = APIS[22]


class ScriptedSource:
    """A block source that answers from a script: a block, or an exception to raise; then it
    waits on `release` (a controller that does not answer) once the script is used up."""

    def __init__(self, *answers: ProducerIdBlock | Exception) -> None:
        self.answers = list(answers)
        self.calls = 0
        self.release = asyncio.Event()

    async def fetch(self) -> ProducerIdBlock:
        self.calls += 1
        if not self.answers:
            await self.release.wait()
            raise BlockUnavailable("released")
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def describe(self) -> str:
        return "the scripted controller (node 9) as broker 1 at broker epoch 5"


def run(coroutine):
    return asyncio.run(coroutine)


def test_blocks_hand_out_each_id_once_and_prefetch_at_90_percent():
    blocks = ProducerIdBlocks()
    assert blocks.claim() is None and blocks.prefetch_due
    blocks.add(ProducerIdBlock(100, 10))
    claimed = [blocks.claim() for _ in range(9)]
    assert claimed == list(range(100, 109))
    assert not blocks.prefetch_due, "9 of 10 handed out: the 9th id (108) is below the prefetch point 109"
    assert blocks.claim() == 109 and blocks.prefetch_due, "the id at 90% asks for the next block"
    assert blocks.claim() is None, "used up"
    blocks.add(ProducerIdBlock(2000, 10))
    assert blocks.claim() == 2000


def test_a_prefetched_block_follows_the_current_one():
    blocks = ProducerIdBlocks()
    blocks.add(ProducerIdBlock(0, 10))
    for _ in range(9):
        blocks.claim()
    blocks.add(ProducerIdBlock(10, 10))
    assert not blocks.prefetch_due, "one block is prefetched already"
    assert [blocks.claim() for _ in range(3)] == [9, 10, 11]


@pytest.mark.parametrize("block", [ProducerIdBlock(5, 10), ProducerIdBlock(14, 1), ProducerIdBlock(20, 0),
                                   ProducerIdBlock(-1, 10)])
def test_a_block_that_goes_backwards_or_is_empty_is_refused(block):
    blocks = ProducerIdBlocks()
    blocks.add(ProducerIdBlock(10, 5))
    with pytest.raises(ValueError):
        blocks.add(block)
    assert [blocks.claim() for _ in range(6)] == [10, 11, 12, 13, 14, None], "nothing changed"


def test_the_manager_prefetches_the_next_block_before_the_current_one_runs_out():
    async def scenario():
        source = ScriptedSource(ProducerIdBlock(0, 10), ProducerIdBlock(10, 10))
        manager = ProducerIdManager(1, source, wait_s=60)
        first = [await manager.allocate() for _ in range(9)]
        assert source.calls == 1
        first.append(await manager.allocate())  # id 9: 90% of the block handed out
        await asyncio.sleep(0)  # the prefetch runs
        assert source.calls == 2, "the next block was asked for while one id of the current was left"
        later = [await manager.allocate() for _ in range(5)]
        manager.close()
        return first + later

    assert run(scenario()) == list(range(15))


def test_concurrent_callers_share_one_request_and_get_distinct_ids():
    async def scenario():
        source = ScriptedSource(ProducerIdBlock(50, 4), ProducerIdBlock(54, 4), ProducerIdBlock(58, 4))
        manager = ProducerIdManager(1, source, wait_s=60)
        ids = await asyncio.gather(*(manager.allocate() for _ in range(10)))
        manager.close()
        return ids, source.calls

    ids, calls = run(scenario())
    assert sorted(ids) == list(range(50, 60)) and calls == 3


def test_no_block_within_the_wait_is_an_error_naming_what_it_waited_for(caplog):
    async def scenario():
        source = ScriptedSource()  # never answers
        manager = ProducerIdManager(1, source, wait_s=0.05)
        with pytest.raises(ProducerIdsUnavailable) as raised:
            await manager.allocate()
        source.answers.append(ProducerIdBlock(7000, 10))
        source.release.set()  # the hung request fails; the next one gets a block
        await asyncio.sleep(0)
        manager.wait_s = 60
        later = await manager.allocate()
        manager.close()
        return str(raised.value), later

    with caplog.at_level(logging.WARNING, logger=pids.__name__):
        message, later = run(scenario())
    assert "broker 1" in message and "the scripted controller (node 9)" in message and "broker epoch 5" in message
    assert "no answer yet" in message
    assert message in caplog.text
    assert later == 7000, "a block that comes later serves the next InitProducerId"


def test_a_failing_controller_call_is_retried_within_the_wait(caplog):
    async def scenario():
        source = ScriptedSource(BlockUnavailable("the controller answered STALE_BROKER_EPOCH to broker epoch 4"),
                                BlockUnavailable("the controller did not answer"), ProducerIdBlock(3000, 10))
        manager = ProducerIdManager(1, source, wait_s=60)
        producer_id = await manager.allocate()
        manager.close()
        return producer_id, source.calls, manager.last_error

    with caplog.at_level(logging.INFO, logger=pids.__name__):
        producer_id, calls, last_error = run(scenario())
    assert (producer_id, calls, last_error) == (3000, 3, None)
    assert "STALE_BROKER_EPOCH" in caplog.text and "the controller did not answer" in caplog.text


def test_a_failure_is_the_error_of_the_answer_when_the_wait_ends():
    async def scenario():
        source = ScriptedSource(*[BlockUnavailable("the controller answered NOT_CONTROLLER to broker epoch 5")] * 50)
        manager = ProducerIdManager(1, source, wait_s=0.3)
        with pytest.raises(ProducerIdsUnavailable) as raised:
            await manager.allocate()
        manager.close()
        return str(raised.value)

    assert "NOT_CONTROLLER" in run(scenario())


def init_producer_id_request() -> Request:
    body = INIT_PRODUCER_ID.request(transactional_id=None, transaction_timeout_ms=60000)
    return Request(RequestHeader(22, 4, 1, "t"), INIT_PRODUCER_ID,
                   decode_body(INIT_PRODUCER_ID.request, body.encode(version=4), 0, 4))


def test_init_producer_id_answers_coordinator_load_in_progress_without_a_block(tmp_path):
    async def scenario():
        source = ScriptedSource()
        manager = ReplicaManager(1, [tmp_path], producer_ids=ProducerIdManager(1, source, wait_s=0.05))
        handlers = register_produce(Dispatcher(), manager)
        refused = (await handlers.init_producer_id(init_producer_id_request())).body
        source.answers.append(ProducerIdBlock(1 << 62, 1000))
        source.release.set()
        manager.producer_ids.wait_s = 60
        served = (await handlers.init_producer_id(init_producer_id_request())).body
        manager.producer_ids.close()
        manager.close()
        return refused, served

    refused, served = run(scenario())
    assert (refused.error_code, refused.producer_id) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1)
    assert (served.error_code, served.producer_id, served.producer_epoch) == (0, 1 << 62, 0)


# -- the controller channel ----------------------------------------------------------------------


class FakePeer:
    def __init__(self, answer) -> None:
        self.answer = answer
        self.sent: list = []

    async def request(self, api, version, body):
        self.sent.append((api.key, version, body.broker_id, body.broker_epoch))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def response(error: int = 0, start: int = -1, length: int = 0):
    return ALLOCATE_PRODUCER_IDS.response(throttle_time_ms=0, error_code=error, producer_id_start=start,
                                          producer_id_len=length)  # fmt: skip


def test_controller_blocks_send_the_broker_id_and_epoch_and_read_the_block():
    peer = FakePeer(response(0, 5000, 1000))
    source = ControllerBlocks(102, lambda: peer, lambda: 1, lambda: 45)
    assert run(source.fetch()) == ProducerIdBlock(5000, 1000)
    assert peer.sent == [(67, 0, 102, 45)]
    assert source.describe() == "the active controller (node 1) as broker 102 at broker epoch 45"


@pytest.mark.parametrize(("peer", "epoch", "says"), [
    (None, 45, "no active controller"),
    (FakePeer(response()), -1, "not registered"),
    (FakePeer(response(ErrorCode.STALE_BROKER_EPOCH)), 45, "STALE_BROKER_EPOCH to broker epoch 45"),
    (FakePeer(response(ErrorCode.NOT_CONTROLLER)), 45, "NOT_CONTROLLER"),
    (FakePeer(PeerUnavailable("127.0.0.1:1: AllocateProducerIds v0: timeout")), 45, "did not answer"),
])
def test_controller_blocks_turn_every_failure_into_block_unavailable(peer, epoch, says):
    source = ControllerBlocks(102, lambda: peer, lambda: None if peer is None else 1, lambda: epoch)
    with pytest.raises(BlockUnavailable, match=says):
        run(source.fetch())


def test_in_process_blocks_never_overlap_across_brokers_of_one_process():
    first, second = pids.InProcessBlocks(10), pids.InProcessBlocks(1000)
    got = [run(source.fetch()) for source in (first, second, first, second)]
    ranges = sorted((block.first, block.end) for block in got)
    assert all(end <= start for (_, end), (start, _) in zip(ranges, ranges[1:], strict=False))
    assert first.describe().startswith("this process")
