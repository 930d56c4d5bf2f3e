"""A broker forwarding an admin request retries NOT_CONTROLLER instead of handing it to the client:
a controller that just resigned (a snapshot turn) answers it before the broker learns of the new leader.
AlterConfigs and IncrementalAlterConfigs resources naming another broker are answered by the broker."""

from __future__ import annotations

import asyncio

import pytest

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


class ConfigController:
    """A controller that answers every AlterConfigs / IncrementalAlterConfigs resource it gets with success."""

    host, port = "127.0.0.1", 9093

    def __init__(self) -> None:
        self.asked: list[list[tuple[int, str]]] = []

    async def request(self, api, version, body, client_id=None):
        self.asked.append([(r.resource_type, r.resource_name) for r in body.resources])
        result = api.response.AlterConfigsResourceResponse
        return api.response(throttle_time_ms=0, responses=[
            result(error_code=0, error_message=None, resource_type=r.resource_type, resource_name=r.resource_name)
            for r in reversed(body.resources)])  # any order: the broker answers in the request's


def alter_configs(dispatcher: Dispatcher, key: int, *resources: tuple[int, str]):
    api = APIS[key]
    schema = api.request.AlterConfigsResource
    body = api.request(version=1, validate_only=False, resources=[
        schema(resource_type=kind, resource_name=name, configs=[]) for kind, name in resources])
    return asyncio.run(dispatcher.dispatch(Request(RequestHeader(key, 1, 1, "test"), api, body))).body


@pytest.mark.parametrize("key", [33, 44])
def test_a_broker_resource_naming_another_broker_is_refused_by_the_broker_itself(key):
    """Kafka's broker (ConfigAdminManager.preprocess) answers it; the rest goes to the controller, and the
    answer follows the request's order."""
    dispatcher, controller = Dispatcher(), ConfigController()
    register_forwarding(dispatcher, lambda: controller, refuse, node_id=101)
    answer = alter_configs(dispatcher, key, (2, "orders"), (4, "102"), (4, "101"), (4, "x"), (4, ""))
    assert controller.asked == [[(2, "orders"), (4, "101"), (4, "")]]
    assert [(r.resource_name, r.error_code, r.error_message) for r in answer.responses] == [
        ("orders", 0, None),
        ("102", ErrorCode.INVALID_REQUEST, "Unexpected broker id, expected 101, but received 102"),
        ("101", 0, None),
        ("x", ErrorCode.INVALID_REQUEST, "Node id must be an integer, but it is: x"),
        ("", 0, None)]
    only_refused = alter_configs(dispatcher, key, (4, "103"), (2, "twice"), (2, "twice"))
    assert len(controller.asked) == 1, "nothing left to forward: the controller is not asked"
    assert [(r.resource_name, r.error_message) for r in only_refused.responses] == [
        ("103", "Unexpected broker id, expected 101, but received 103"),
        ("twice", "Each resource must appear at most once."), ("twice", "Each resource must appear at most once.")]
