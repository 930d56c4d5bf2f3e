"""The listener's pipelined APIs (issue 17): a connection's next requests start while one waits,
answers leave in request order; any other API still waits until it is alone."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from quorum.net.dispatch import Dispatcher, Reply
from quorum.net.peer_client import PeerClient
from quorum.server.listener import KafkaListener
from quorum.wire.protocol import APIS, Request
from tests.controller.fakes import create_topics_request

CREATE_TOPICS, DESCRIBE_CONFIGS = APIS[19], APIS[32]
WAIT_S = 30  # a deadline for the waits below, never reached when the listener works


def created(name: str) -> Any:
    result = CREATE_TOPICS.response.CreatableTopicResult
    return CREATE_TOPICS.response(throttle_time_ms=0, topics=[result(
        name=name, topic_id=None, error_code=0, error_message=None, num_partitions=1, replication_factor=1,
        configs=[])])  # fmt: skip


def describe_request() -> Any:
    return DESCRIBE_CONFIGS.request(resources=[], include_synonyms=False, include_documentation=False)


def test_pipelined_requests_run_together_and_are_answered_in_order() -> None:
    events: list[str] = []

    async def scenario() -> list[Any]:
        everyone_started = asyncio.Event()
        started = 0

        async def create(request: Request) -> Reply:
            nonlocal started
            (topic,) = request.body.topics
            events.append(f"start {topic.name}")
            started += 1
            if started == 3:
                everyone_started.set()
            # the first request waits for the third: only a pipelined connection gets there
            await asyncio.wait_for(everyone_started.wait(), WAIT_S)
            if topic.name == "a":
                await asyncio.sleep(0.01)  # answered last of the three, yet its answer goes first
            events.append(f"end {topic.name}")
            return Reply(created(topic.name), request.version)

        async def describe(request: Request) -> Reply:
            events.append("describe")
            return Reply(DESCRIBE_CONFIGS.response(throttle_time_ms=0, results=[]), request.version)

        dispatcher = Dispatcher()
        dispatcher.register(CREATE_TOPICS.key, create, pipelined=True)
        dispatcher.register(DESCRIBE_CONFIGS.key, describe)
        listener = KafkaListener(dispatcher)
        await listener.start()
        client = PeerClient("127.0.0.1", listener.port, "test", WAIT_S * 1000)
        try:
            sent = [client.request(CREATE_TOPICS, 5, create_topics_request((name, 1, 1))) for name in "abc"]
            sent.append(client.request(DESCRIBE_CONFIGS, 4, describe_request()))
            return list(await asyncio.gather(*sent))  # PeerClient checks the answers' order (correlation ids)
        finally:
            await client.close()
            await listener.close()

    answers = asyncio.run(scenario())
    assert [a.topics[0].name for a in answers[:3]] == ["a", "b", "c"]
    assert events[:3] == ["start a", "start b", "start c"]
    assert events[-1] == "describe"  # not pipelined: it waited until every request before it was answered
    assert sorted(events[3:6]) == ["end a", "end b", "end c"]


def test_a_failing_pipelined_handler_closes_only_its_connection() -> None:
    async def scenario() -> tuple[bool, Any]:
        async def create(request: Request) -> Reply:
            (topic,) = request.body.topics
            if topic.name == "boom":
                raise RuntimeError("handler bug")
            return Reply(created(topic.name), request.version)

        dispatcher = Dispatcher()
        dispatcher.register(CREATE_TOPICS.key, create, pipelined=True)
        listener = KafkaListener(dispatcher)
        await listener.start()
        broken = PeerClient("127.0.0.1", listener.port, "broken", WAIT_S * 1000)
        other = PeerClient("127.0.0.1", listener.port, "other", WAIT_S * 1000)
        try:
            failed = False
            try:
                await broken.request(CREATE_TOPICS, 5, create_topics_request(("boom", 1, 1)))
            except ConnectionError:
                failed = True
            return failed, await other.request(CREATE_TOPICS, 5, create_topics_request(("fine", 1, 1)))
        finally:
            await broken.close()
            await other.close()
            await listener.close()

    failed, answer = asyncio.run(scenario())
    assert failed and answer.topics[0].name == "fine"


def test_close_ends_a_connection_whose_handler_lost_its_cancellation() -> None:
    """Python 3.11's `asyncio.wait_for` returns the inner result when it completes as the
    cancellation arrives; a handler waiting that way answers as if never cancelled. The client
    here asks again as soon as it is answered (a follower's Fetch loop): close must still end."""

    async def scenario() -> tuple[bool, int]:
        answered = 0

        async def describe(request: Request) -> Reply:
            nonlocal answered
            with contextlib.suppress(asyncio.CancelledError):  # what wait_for does when its inner wait
                await asyncio.sleep(0.05)  # finished in the same turn
            answered += 1
            return Reply(DESCRIBE_CONFIGS.response(throttle_time_ms=0, results=[]), request.version)

        dispatcher = Dispatcher()
        dispatcher.register(DESCRIBE_CONFIGS.key, describe)
        listener = KafkaListener(dispatcher)
        await listener.start()
        client = PeerClient("127.0.0.1", listener.port, "test", WAIT_S * 1000)

        async def ask_for_ever() -> None:
            while True:
                await client.request(DESCRIBE_CONFIGS, 4, describe_request())

        asking = asyncio.create_task(ask_for_ever())
        while answered < 3:
            await asyncio.sleep(0.01)
        closing = asyncio.create_task(listener.close())
        await asyncio.wait({closing}, timeout=10)
        ended = closing.done()
        asking.cancel()
        await client.close()  # ends the connection if close did not, so that the scenario ends
        await closing
        return ended, answered

    ended, answered = asyncio.run(scenario())
    assert answered >= 3
    assert ended, "the listener's close did not end in 10 s: the connection went on serving its client"
