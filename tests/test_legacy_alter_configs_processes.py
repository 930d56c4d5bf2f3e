"""The legacy AlterConfigs (API 33) with real clients against 1 controller and 3 brokers (issue 31, item 7).

Kafka 4 still serves the non-incremental AlterConfigs: the configs a request names become the
resource's whole set of dynamic configs, and every one it does not name is deleted (Kafka's
ConfigurationControlManager.legacyAlterConfigs writes a ConfigRecord with a null value for each).
confluent-kafka's `AdminClient.alter_configs` and aiokafka's `alter_configs` send it as it is; kafka-python's
`KafkaAdminClient.alter_configs(..., incremental=False)` first reads the modified configs and sends
them along (a read-modify-write of its own), and its `reset_configs(..., incremental=False)` of a
whole resource sends an empty set. The brokers forward it to the active controller and apply the
replaced set exactly as they apply IncrementalAlterConfigs (max.message.bytes is the config whose
effect a producer sees at once).
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource as AioResource
from aiokafka.admin.config_resource import ConfigResourceType as AioResourceType
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KafkaPythonResource

from quorum.launcher import LocalCluster
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS
from tests.test_broker_processes import QUIET
from tests.test_controller_processes import create, exchange, wait_until

pytestmark = pytest.mark.timeout(300)

ALTER_CONFIGS, API_VERSIONS = 33, 18
BIG = b"x" * 5000
"""A record above the topic's max.message.bytes of 2000 and far below Kafka's default (1048588)."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[LocalCluster]:
    """The issue's cluster: 1 controller, brokers 101-103; shared by the module's tests."""
    cluster = LocalCluster(tmp_path_factory.mktemp("legacy-alter-configs"), controllers=1, brokers=3)
    cluster.format_storage()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def legacy_alter(admin: AdminClient, topic: str, configs: dict[str, str], validate_only: bool = False) -> None:
    """confluent-kafka's (deprecated) alter_configs of one topic: AlterConfigs, not the incremental API."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        futures = admin.alter_configs([ConfigResource(ConfigResource.Type.TOPIC, topic, set_config=configs)],
                                      validate_only=validate_only, request_timeout=30)
    for future in futures.values():
        future.result(timeout=60)


def dynamic(admin: AdminClient, topic: str) -> dict[str, str]:
    """The topic's configs that are not at their default, as DescribeConfigs shows them."""
    [future] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
    return {name: entry.value for name, entry in future.result(timeout=60).items() if not entry.is_default}


def refusal(call) -> int:
    """The error code a call that must fail raised with."""
    with pytest.raises(KafkaException) as raised:
        call()
    return raised.value.args[0].code()


def produce_big(address: str, topic: str) -> KafkaError | None:
    """One BIG record to the topic: None once delivered, else the delivery error (MSG_SIZE_TOO_LARGE while
    the partition's leader applies a max.message.bytes below its size)."""
    producer = Producer({"bootstrap.servers": address, "message.timeout.ms": 20_000, **QUIET})
    outcome: list[KafkaError | None] = []
    producer.produce(topic, BIG, on_delivery=lambda error, _: outcome.append(error))
    assert producer.flush(30) == 0, f"the record to {topic} was neither delivered nor refused within 30 s"
    return outcome[0]


def test_apis_are_advertised_beside_incremental_alter_configs(cluster) -> None:
    """ApiVersions names AlterConfigs (v0-v2) on every broker and on the controller listener, as Kafka's do."""
    body = APIS[API_VERSIONS].request(version=3, client_software_name="test", client_software_version="1")
    for node_id in (1, 101, 102, 103):
        keys = {k.api_key: (k.min_version, k.max_version)
                for k in exchange(cluster.specs[node_id].address, API_VERSIONS, 3, body).api_keys}
        assert keys.get(ALTER_CONFIGS) == (0, 2) and 44 in keys, f"node {node_id} advertises {sorted(keys)}"


def test_legacy_alter_configs_replaces_the_whole_config_set(cluster) -> None:
    address = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": address, **QUIET})
    create(admin, NewTopic("replaced", 1, 3, config={"max.message.bytes": "2000", "retention.ms": "3600000"}))
    assert dynamic(admin, "replaced") == {"max.message.bytes": "2000", "retention.ms": "3600000"}
    assert produce_big(address, "replaced").code() == KafkaError.MSG_SIZE_TOO_LARGE

    legacy_alter(admin, "replaced", {"retention.ms": "7200000"}, validate_only=True)
    assert dynamic(admin, "replaced") == {"max.message.bytes": "2000", "retention.ms": "3600000"}

    unknown = refusal(lambda: legacy_alter(admin, "replaced", {"retention.ms": "7200000", "no.such.config": "1"}))
    invalid = refusal(lambda: legacy_alter(admin, "replaced", {"retention.ms": "soon"}))
    assert (unknown, invalid) == (KafkaError.INVALID_CONFIG, KafkaError.INVALID_CONFIG)
    assert dynamic(admin, "replaced") == {"max.message.bytes": "2000", "retention.ms": "3600000"}

    legacy_alter(admin, "replaced", {"retention.ms": "7200000"})
    assert dynamic(admin, "replaced") == {"retention.ms": "7200000"}  # max.message.bytes back at its default
    wait_until("the leader of replaced-0 accepting a 5000-byte record (max.message.bytes back at 1048588)",
               lambda: produce_big(address, "replaced") is None, timeout_s=60)


def broker_config(admin: AdminClient, broker: str) -> dict[str, tuple[str, int]]:
    """(value, source) of each config DescribeConfigs shows for the broker."""
    [future] = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, broker)]).values()
    return {name: (entry.value, entry.source) for name, entry in future.result(timeout=60).items()}


def test_legacy_alter_configs_of_a_broker(cluster) -> None:
    """A BROKER resource's set is replaced too (librdkafka sends it to the broker it names); a broker
    asked to alter another broker's configs refuses, as Kafka's broker does."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **QUIET})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for configs in ({"log.retention.hours": "100"}, {"num.partitions": "2"}):
            for future in admin.alter_configs([ConfigResource(ConfigResource.Type.BROKER, "102",
                                                              set_config=configs)]).values():
                future.result(timeout=60)
    shown = broker_config(admin, "102")
    assert shown["num.partitions"] == ("2", 2)  # DYNAMIC_BROKER_CONFIG
    assert shown["log.retention.hours"] == ("168", 5)  # DEFAULT_CONFIG again: deleted by the second call

    schema = APIS[ALTER_CONFIGS].request
    body = schema(version=2, validate_only=False, resources=[schema.AlterConfigsResource(
        resource_type=4, resource_name="103", configs=[schema.AlterConfigsResource.AlterableConfig(
            name="num.partitions", value="3")])])
    [answer] = exchange(cluster.specs[101].address, ALTER_CONFIGS, 2, body).responses
    assert (answer.error_code, answer.error_message) == (
        ErrorCode.INVALID_REQUEST, "Unexpected broker id, expected 101, but received 103")


def test_librdkafkas_own_alter_configs_case(cluster) -> None:
    """librdkafka's tests/0081-admin.c do_test_AlterConfigs, one call: a topic's valid configs, a valid
    config of a broker (the call goes to that broker), valid configs of a topic that does not exist;
    answered NO_ERROR, NO_ERROR, UNKNOWN_TOPIC_OR_PART."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **QUIET})
    create(admin, NewTopic("rdkafka-0081", 1, 1))
    resources = [
        ConfigResource(ConfigResource.Type.TOPIC, "rdkafka-0081",
                       set_config={"compression.type": "gzip", "flush.ms": "12345678"}),
        ConfigResource(ConfigResource.Type.BROKER, "103",
                       set_config={"sasl.kerberos.min.time.before.relogin": "58000"}),
        ConfigResource(ConfigResource.Type.TOPIC, "rdkafka-0081-missing",
                       set_config={"compression.type": "lz4", "offset.metadata.max.bytes": "12345"})]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        futures = admin.alter_configs(resources, request_timeout=30)
    outcomes = []
    for resource in resources:
        try:
            futures[resource].result(timeout=60)
            outcomes.append(KafkaError.NO_ERROR)
        except KafkaException as exc:
            outcomes.append(exc.args[0].code())
    assert outcomes == [KafkaError.NO_ERROR, KafkaError.NO_ERROR, KafkaError.UNKNOWN_TOPIC_OR_PART]
    assert dynamic(admin, "rdkafka-0081") == {"compression.type": "gzip", "flush.ms": "12345678"}


def test_kafka_python_legacy_alter_configs_and_whole_reset(cluster) -> None:
    address = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": address, **QUIET})
    create(admin, NewTopic("reset", 1, 3, config={"max.message.bytes": "2000", "cleanup.policy": "compact"}))
    client = KafkaAdminClient(bootstrap_servers=address, client_id="legacy-alter-configs")
    try:
        resource = KafkaPythonResource("TOPIC", "reset", {"retention.ms": "7200000"})
        answer = client.alter_configs([resource], incremental=False)  # sends the modified configs along
        assert answer == {"topic": {"reset": "OK"}}
        assert dynamic(admin, "reset") == {"max.message.bytes": "2000", "cleanup.policy": "compact",
                                           "retention.ms": "7200000"}

        resource = KafkaPythonResource("TOPIC", "reset", {"no.such.config": "1"})
        [[refused]] = [r.values() for r in client.alter_configs([resource], incremental=False,
                                                                 raise_on_unknown=False).values()]
        assert refused.startswith("[Error 40] InvalidConfigurationError"), refused

        answer = client.reset_configs([KafkaPythonResource("TOPIC", "reset")], incremental=False)
        assert answer == {"topic": {"reset": "OK"}}
        assert dynamic(admin, "reset") == {}
    finally:
        client.close()
    wait_until("the leader of reset-0 accepting a 5000-byte record (max.message.bytes back at 1048588)",
               lambda: produce_big(address, "reset") is None, timeout_s=60)


def test_aiokafka_alter_configs_replaces_the_set(cluster) -> None:
    """aiokafka's AIOKafkaAdminClient.alter_configs has only the legacy API: its call replaces the set too."""
    address = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": address, **QUIET})
    create(admin, NewTopic("aiokafka", 1, 3, config={"max.message.bytes": "2000", "retention.ms": "3600000"}))

    async def alter() -> list:
        client = AIOKafkaAdminClient(bootstrap_servers=address, request_timeout_ms=30_000)
        await client.start()
        try:
            return await client.alter_configs([AioResource(AioResourceType.TOPIC, "aiokafka",
                                                           {"segment.ms": "3600000"})])
        finally:
            await client.close()

    answers = asyncio.run(alter())  # AlterConfigsResponse: resources of (code, message, type, name)
    assert [(name, code) for answer in answers for code, _, _, name in answer.resources] == [("aiokafka", 0)]
    assert dynamic(admin, "aiokafka") == {"segment.ms": "3600000"}
