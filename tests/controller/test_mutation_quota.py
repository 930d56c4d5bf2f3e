"""KIP-599's controller mutation quota: the token bucket, strict and permissive quotas, and the controller
service refusing the partitions one client asks for past its rate with THROTTLING_QUOTA_EXCEEDED."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from quorum.controller import ControllerConfig, QuorumController
from quorum.controller.mutation_quota import ControllerMutationQuotas, TokenBucket
from quorum.server.controller_service import ControllerService
from quorum.wire.errors import ErrorCode
from quorum.wire.framing import RequestHeader
from quorum.wire.protocol import APIS, Request
from tests.controller.fakes import create_partitions_request, create_topics_request, delete_topics_request
from tests.controller.test_controller_batches import CLUSTER, FakeNode

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
THROTTLED = ErrorCode.THROTTLING_QUOTA_EXCEEDED


def test_the_bucket_refills_at_the_rate_up_to_its_burst():
    bucket = TokenBucket(rate=2.0, burst=22.0, now_ms=0)
    bucket.take(30, now_ms=0)
    assert bucket.exceeded(0) and bucket.throttle_time_ms(0) == 4_000  # 8 tokens below zero at 2 a second
    assert bucket.throttle_time_ms(1_000) == 3_000
    assert not bucket.exceeded(4_000)
    assert bucket.tokens == 0
    assert bucket.throttle_time_ms(1_000_000) == 0 and bucket.tokens == 22.0  # never above the burst


def test_a_strict_quota_refuses_only_once_the_bucket_is_below_zero():
    quotas = ControllerMutationQuotas(rate=1.0, window_num=2, window_size_s=1)  # burst 2
    quota = quotas.quota_for("User:ANONYMOUS", "admin", CREATE_TOPICS, 6, now_ms=0)
    assert quota.strict
    assert quota.try_take(5)  # tokens left: the whole topic goes, taking the bucket to -3
    assert not quota.try_take(1)
    assert quota.throttle_time_ms() == 3_000
    later = quotas.quota_for("User:ANONYMOUS", "admin", CREATE_TOPICS, 6, now_ms=3_000)
    assert later.try_take(1) and later.throttle_time_ms() == 1_000


def test_old_versions_get_a_permissive_quota_that_counts_but_never_refuses():
    quotas = ControllerMutationQuotas(rate=1.0, window_num=1, window_size_s=1)
    for key, strict_since in ((CREATE_TOPICS, 6), (CREATE_PARTITIONS, 3), (DELETE_TOPICS, 5)):
        assert quotas.quota_for("User:a", key, key, strict_since, 0).strict
        old = quotas.quota_for("User:a", key, key, strict_since - 1, 0)
        assert not old.strict
        assert old.try_take(10) and old.try_take(10) and old.throttle_time_ms() == 19_000


def test_each_principal_and_client_id_has_a_bucket_of_its_own_and_no_rate_means_no_quota():
    quotas = ControllerMutationQuotas(rate=1.0, window_num=1, window_size_s=1)
    assert quotas.quota_for("User:a", "x", CREATE_TOPICS, 7, 0).try_take(3)
    assert not quotas.quota_for("User:a", "x", CREATE_TOPICS, 7, 0).try_take(1)
    assert quotas.quota_for("User:a", "y", CREATE_TOPICS, 7, 0).try_take(1)
    assert quotas.quota_for("User:b", "x", CREATE_TOPICS, 7, 0).try_take(1)
    unbounded = ControllerMutationQuotas(rate=None).quota_for("User:a", "x", CREATE_TOPICS, 7, 0)
    assert all(unbounded.try_take(10_000) for _ in range(10)) and unbounded.throttle_time_ms() == 0


def test_the_rate_is_read_from_the_node_properties_and_bad_values_are_refused():
    config = ControllerConfig.from_properties({"controller_mutation_rate": "2.5", "quota.window.num": "3"})
    assert (config.controller_mutation_rate, config.quota_window_num, config.quota_window_size_s) == (2.5, 3, 1)
    assert ControllerConfig.from_properties({}).controller_mutation_rate is None
    for bad in ("fast", "0", "-1"):
        with pytest.raises(ValueError, match="controller_mutation_rate"):
            ControllerConfig.from_properties({"controller_mutation_rate": bad})
    with pytest.raises(ValueError, match="quota.window.num"):
        ControllerMutationQuotas(rate=1.0, window_num=0)


def quota_service(rate: float) -> tuple[FakeNode, dict[int, Any]]:
    """A controller service whose clients may create or delete `rate` partitions a second, burst 1 s of it."""
    node = FakeNode()
    config = ControllerConfig(controller_mutation_rate=rate, quota_window_num=1, quota_window_size_s=1)
    service = ControllerService(node, config)  # type: ignore[arg-type]
    service._controller = QuorumController(CLUSTER, config, random.Random(1))
    service.register(node.dispatcher)
    return node, {key: node.dispatcher._handlers[key] for key in (CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS)}


def ask(handler: Any, key: int, version: int, body: Any, client_id: str = "admin") -> Any:
    return asyncio.run(handler(Request(RequestHeader(key, version, 1, client_id), APIS[key], body))).body


def test_a_client_past_its_rate_gets_throttling_quota_exceeded_for_each_mutation_api():
    node, handlers = quota_service(rate=4.0)  # the fake node's clock stands still: no refill
    created = ask(handlers[CREATE_TOPICS], CREATE_TOPICS, 6,
                  create_topics_request(("a", 3, 1), ("b", 3, 1), ("c", 1, 1)))
    assert [(t.name, t.error_code) for t in created.topics] == [("a", 0), ("b", 0), ("c", THROTTLED)]
    assert created.throttle_time_ms == 500  # 2 partitions below zero at 4 a second
    assert {"a", "b"} <= set(node.image.topics) and "c" not in node.image.topics
    grown = ask(handlers[CREATE_PARTITIONS], CREATE_PARTITIONS, 3, create_partitions_request(("a", 4)))
    assert [r.error_code for r in grown.results] == [THROTTLED] and grown.throttle_time_ms == 500
    deleted = ask(handlers[DELETE_TOPICS], DELETE_TOPICS, 5, delete_topics_request(names=["a"], version=5))
    assert [r.error_code for r in deleted.responses] == [THROTTLED]
    assert "a" in node.image.topics
    other = ask(handlers[CREATE_TOPICS], CREATE_TOPICS, 6, create_topics_request(("d", 2, 1)), client_id="other")
    assert [t.error_code for t in other.topics] == [0] and other.throttle_time_ms == 0
    old = ask(handlers[CREATE_TOPICS], CREATE_TOPICS, 5, create_topics_request(("e", 1, 1)))
    assert [t.error_code for t in old.topics] == [0] and old.throttle_time_ms == 750  # permissive: counted
