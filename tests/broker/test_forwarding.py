"""A broker forwarding an admin request retries NOT_CONTROLLER instead of handing it to the client:
a controller that just resigned (a snapshot turn) answers it before the broker learns of the new leader."""

from __future__ import annotations

import asyncio

from quorum.broker.forwarding import CREATE_TOPICS, register_forwarding
from quorum.net.dispatch import Dispatcher
from quorum.server.refusals import refuse
from quorum.wire.errors import ErrorCode
from quorum.wire.framing import RequestHeader
from quorum.wire.protocol import APIS, Request

API = APIS[CREATE_TOPICS]


def answer(error: int):
    result = API.response.CreatableTopicResult(name="orders", topic_id=None, error_code=error, error_message=None,
                                               num_partitions=3, replication_factor=3, configs=[])
    return API.response(version=7, throttle_time_ms=0, topics=[result])


class Controller:
    """A controller client whose first answers are NOT_CONTROLLER (it resigned), then a new leader's."""

    host, port = "127.0.0.1", 9093

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.asked = 0

    async def request(self, api, version, body, client_id=None):
        self.asked += 1
        self.client_id = client_id
        return answer(ErrorCode.NOT_CONTROLLER if self.asked <= self.refusals else ErrorCode.NONE)


def create_topics(dispatcher: Dispatcher, timeout_ms: int = 5000):
    body = API.request(version=7, topics=[API.request.CreatableTopic(
        name="orders", num_partitions=3, replication_factor=3, assignments=[], configs=[])],
        timeout_ms=timeout_ms, validate_only=False)
    request = Request(RequestHeader(CREATE_TOPICS, 7, 1, "test"), API, body)
    return asyncio.run(dispatcher.dispatch(request)).body


def test_not_controller_is_retried_until_the_new_leader_answers():
    dispatcher, controller = Dispatcher(), Controller(refusals=3)
    register_forwarding(dispatcher, lambda: controller, refuse)
    assert [t.error_code for t in create_topics(dispatcher).topics] == [ErrorCode.NONE]
    assert controller.asked == 4
    assert controller.client_id == "test"  # the client's id, which the controller's mutation quota counts by


def test_a_controller_that_keeps_refusing_ends_in_request_timed_out_not_not_controller():
    dispatcher, controller = Dispatcher(), Controller(refusals=10**6)
    register_forwarding(dispatcher, lambda: controller, refuse)
    assert [t.error_code for t in create_topics(dispatcher, timeout_ms=1000).topics] == [ErrorCode.REQUEST_TIMED_OUT]
