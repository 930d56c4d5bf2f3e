"""KIP-631 with real processes on 127.0.0.1: 3 controllers and 3 brokers from `quorum local-cluster`.

Topics are created with confluent-kafka's AdminClient (through a broker, which forwards to the
active controller), listed by kcat and by kafka-python; a broker killed with SIGKILL is fenced
within its session timeout and its partitions get new leaders with higher leader epochs; the
active controller killed, another takes over and nothing committed is lost; a topic deleted and
created again under the same name gets a new topic id and a higher KIP-232 topic epoch.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from kafka import KafkaAdminClient

from quorum.admin import wait_for_leader
from quorum.launcher import LocalCluster
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS, RequestHeader, decode_response, encode_request

pytestmark = pytest.mark.timeout(300)

SESSION_TIMEOUT_MS = 3000
SETTINGS = {"broker.session.timeout.ms": str(SESSION_TIMEOUT_MS), "broker.heartbeat.interval.ms": "500"}
BROKERS = (101, 102, 103)


@dataclass(frozen=True)
class Partition:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]


@dataclass(frozen=True)
class Topic:
    topic_id: uuid.UUID
    topic_epoch: int
    partitions: dict[int, Partition]


def metadata(address: str) -> tuple[set[int], dict[str, Topic]]:
    """Brokers and topics as a broker answers Metadata v12 (leader epochs and the topic_epoch tag)."""
    api = APIS[3]
    body = api.request(version=12, topics=None, allow_auto_topic_creation=False,
                       include_topic_authorized_operations=False)
    host, port = address.split(":")
    with socket.create_connection((host, int(port)), timeout=15) as sock:
        sock.sendall(encode_request(api, RequestHeader(3, 12, 1, "controller-test"), body))
        size = int.from_bytes(_read(sock, 4), "big")
        _, response = decode_response(api, 12, _read(sock, size))
    topics = {t.name: Topic(t.topic_id, t.topic_epoch,
                            {p.partition_index: Partition(p.leader_id, p.leader_epoch, tuple(p.isr_nodes))
                             for p in t.partitions})
              for t in response.topics}
    return {b.node_id for b in response.brokers}, topics


@contextmanager
def metadata_answers(address: str, askers: int = 3) -> Iterator[list[set[int]]]:
    """Metadata asked of `address` without pause by `askers` threads while the block runs, as clients
    reconnecting to a restarting broker do: the brokers each answer listed (refused connections and
    cut answers, while the broker is down, are asked again)."""
    answers: list[set[int]] = []
    done = threading.Event()

    def ask() -> None:
        while not done.is_set():
            try:
                answers.append(metadata(address)[0])
            except OSError:
                time.sleep(0.005)

    threads = [threading.Thread(target=ask, daemon=True) for _ in range(askers)]
    for thread in threads:
        thread.start()
    try:
        yield answers
    finally:
        done.set()
        for thread in threads:
            thread.join(30)


def topic_seen_by_a_live_broker(cluster: LocalCluster, brokers: Iterable[int], topic: str) -> Topic | None:
    """`topic` as the first live broker among `brokers` that answers Metadata and names it has it."""
    for broker in cluster.alive():
        if broker in brokers:
            try:
                found = metadata(cluster.specs[broker].address)[1].get(topic)
            except OSError:
                continue
            if found is not None:
                return found
    return None


def create_topics_directly(address: str, name: str) -> int:
    """CreateTopics v7 sent straight to one controller: the error code it answers for the topic."""
    schema = APIS[19].request
    body = schema(version=7, topics=[schema.CreatableTopic(name=name, num_partitions=1, replication_factor=1,
                                                           assignments=[], configs=[])],
                  timeout_ms=10_000, validate_only=False)
    [topic] = exchange(address, 19, 7, body).topics
    return topic.error_code


def set_cluster_default_directly(address: str, name: str, value: str) -> int:
    """IncrementalAlterConfigs v1 SET of a cluster-wide broker default (BROKER resource ""), the
    request `kafka-configs.sh --entity-default` sends; confluent-kafka and kafka-python both refuse
    to name that resource. The error code answered."""
    schema = APIS[44].request
    resource = schema.AlterConfigsResource(resource_type=4, resource_name="", configs=[
        schema.AlterConfigsResource.AlterableConfig(name=name, config_operation=0, value=value)])
    body = schema(version=1, resources=[resource], validate_only=False)
    [answer] = exchange(address, 44, 1, body).responses
    return answer.error_code


def exchange(address: str, api_key: int, version: int, body) -> object:
    """One request on a fresh connection and its decoded response body."""
    api = APIS[api_key]
    host, port = address.split(":")
    with socket.create_connection((host, int(port)), timeout=15) as sock:
        sock.sendall(encode_request(api, RequestHeader(api_key, version, 2, "controller-test"), body))
        size = int.from_bytes(_read(sock, 4), "big")
        _, response = decode_response(api, version, _read(sock, size))
    return response


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "connection closed"
        data += chunk
    return data


def wait_until(what: str, condition, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            result = condition()
        except (OSError, AssertionError):
            result = None
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def create(admin: AdminClient, *topics: NewTopic) -> None:
    for future in admin.create_topics(list(topics), request_timeout=30).values():
        future.result(timeout=60)


DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 2, 3  # DescribeConfigs' ConfigSource
FLAG = "follower.fetch.last.tiered.offset.enable"


def alter_flag(admin: AdminClient, broker: str, op: AlterConfigOpType, value: str | None) -> None:
    """IncrementalAlterConfigs of KIP-1023's flag on one broker, with confluent-kafka."""
    resource = ConfigResource(ConfigResource.Type.BROKER, broker, incremental_configs=[
        ConfigEntry(FLAG, value, incremental_operation=op)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=60)


def broker_configs(admin: AdminClient, *broker_ids: int) -> dict[int, dict]:
    """DescribeConfigs of each broker (librdkafka takes one BROKER resource per call)."""
    shown = {}
    for broker_id in broker_ids:
        [future] = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, str(broker_id))]).values()
        shown[broker_id] = future.result(timeout=60)
    return shown


def flag_in_use(cluster: LocalCluster, broker_id: int) -> str | None:
    """The flag's value as the broker's replica fetchers last picked it up (its log says so)."""
    text = cluster.specs[broker_id].log_path.read_text(errors="replace")
    found = re.findall(rf"{re.escape(FLAG)} is now (\w+)", text)
    return found[-1] if found else None


def test_controllers_and_brokers_serve_real_clients(tmp_path, kcat):
    cluster = LocalCluster(tmp_path, controllers=3, brokers=3, settings=SETTINGS)
    cluster.format_storage()
    cluster.start()
    try:
        first = wait_for_leader(lambda: [cluster.specs[n].address for n in (1, 2, 3) if n in cluster.alive()],
                                None, 60.0)
        addresses = [cluster.specs[b].address for b in BROKERS]
        bootstrap = ",".join(addresses)
        wait_until("three unfenced brokers", lambda: metadata(addresses[0])[0] == set(BROKERS))

        standby = next(n for n in (1, 2, 3) if n != first.leader_id)
        assert create_topics_directly(cluster.specs[standby].address, "nowhere") == ErrorCode.NOT_CONTROLLER

        admin = AdminClient({"bootstrap.servers": bootstrap})
        create(admin, NewTopic("orders", 6, 3), NewTopic("payments", 3, 2))
        brokers, topics = wait_until("the topics on every broker", lambda: all(
            {"orders", "payments"} <= set(metadata(a)[1]) for a in addresses) and metadata(addresses[1]))
        assert {name: len(t.partitions) for name, t in topics.items()} == {"orders": 6, "payments": 3}
        assert topics["orders"].topic_epoch > 0 and topics["payments"].topic_epoch > 0
        assert topics["orders"].topic_epoch != topics["payments"].topic_epoch

        listed = subprocess.run([kcat, "-L", "-b", bootstrap, "-m", "15"], capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
        assert re.search(r'topic "orders" with 6 partitions', listed.stdout), listed.stdout
        assert re.search(r"3 brokers:", listed.stdout), listed.stdout
        kafka_python = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="controller-test")
        try:
            assert {"orders", "payments"} <= set(kafka_python.list_topics())
        finally:
            kafka_python.close()

        # Topic configs: set through a broker with IncrementalAlterConfigs, read back with DescribeConfigs.
        resource = ConfigResource(ConfigResource.Type.TOPIC, "orders", incremental_configs=[
            ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(timeout=60)
        described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "orders")])
        [configs] = [future.result(timeout=60) for future in described.values()]
        assert configs["retention.ms"].value == "3600000"
        assert not configs["retention.ms"].is_default and configs["cleanup.policy"].is_default

        # KIP-1023's broker flag: a cluster-wide default, a per-broker override, both live without a restart.
        flag = FLAG
        assert set_cluster_default_directly(addresses[0], flag, "true") == ErrorCode.NONE
        alter_flag(admin, "102", AlterConfigOpType.SET, "false")
        shown = broker_configs(admin, 101, 102)
        assert (shown[101][flag].value, shown[101][flag].source) == ("true", DYNAMIC_DEFAULT_BROKER_CONFIG)
        assert (shown[102][flag].value, shown[102][flag].source) == ("false", DYNAMIC_BROKER_CONFIG)
        wait_until("broker 101 using the cluster default", lambda: flag_in_use(cluster, 101) == "true")
        wait_until("broker 102 using its own value", lambda: flag_in_use(cluster, 102) == "false")
        alter_flag(admin, "102", AlterConfigOpType.DELETE, None)
        wait_until("broker 102 using the cluster default", lambda: flag_in_use(cluster, 102) == "true")
        assert broker_configs(admin, 102)[102][flag].value == "true"

        # Calls at once (issue 17): the broker forwards them without waiting, the controller decides those
        # waiting together against its pending view and commits them as one batch; each gets its own answer.
        burst = [f"burst-{n:02d}" for n in range(40)]
        calls = [f for name in burst for f in admin.create_topics([NewTopic(name, 2, 3)], request_timeout=60).values()]
        twice = [f for _ in range(2) for f in admin.create_topics([NewTopic("burst-twice", 1, 3)],
                                                                  request_timeout=60).values()]  # fmt: skip
        for future in calls:
            future.result(timeout=120)
        outcomes = []
        for future in twice:
            try:
                future.result(timeout=120)
                outcomes.append("created")
            except KafkaException as exc:
                outcomes.append(exc.args[0].code())
        assert sorted(outcomes, key=str) == sorted(["created", KafkaError.TOPIC_ALREADY_EXISTS], key=str), outcomes
        _, topics_now = wait_until("the burst's topics on every broker", lambda: all(
            {*burst, "burst-twice"} <= set(metadata(a)[1]) for a in addresses) and metadata(addresses[2]))
        assert {len(topics_now[name].partitions) for name in burst} == {2}
        epochs = [topics_now[name].topic_epoch for name in (*burst, "burst-twice")]
        assert len(set(epochs)) == len(epochs) and min(epochs) > topics["payments"].topic_epoch

        # A broker stopped with SIGTERM shuts down under control (KIP-631's WantShutDown): its leaderships
        # move to the other in-sync replicas before it stops, and it is fenced, so its next incarnation
        # registers at once instead of being refused until its old session expires.
        graceful = topics["orders"].partitions[1].leader
        graceful_led = [p for p, part in topics["orders"].partitions.items() if part.leader == graceful]
        graceful_log = cluster.specs[graceful].log_path
        cluster.kill(graceful, signal.SIGTERM)
        assert f"broker {graceful}: controlled shutdown complete" in graceful_log.read_text(), \
            graceful_log.read_text()[-3000:]
        other = next(a for b, a in zip(BROKERS, addresses, strict=True) if b != graceful)
        wait_until(f"broker {graceful}'s orders partitions {graceful_led} led by another broker", lambda: all(
            metadata(other)[1]["orders"].partitions[p].leader not in (graceful, -1) for p in graceful_led))
        restarted_at = graceful_log.stat().st_size
        cluster.start_node(graceful)
        replicas = {"orders": 3, "payments": 2}
        refreshed = wait_until(f"broker {graceful} back in every ISR of orders and payments", lambda: (
            lambda m: graceful in m[0] and all(len(part.isr) == replicas[name] for name in replicas
                                               for part in m[1][name].partitions.values()) and m[1])(metadata(other)))
        topics = {name: refreshed[name] for name in topics}
        with open(graceful_log, "rb") as restarted:
            restarted.seek(restarted_at)
            assert b"DUPLICATE_BROKER_REGISTRATION" not in restarted.read()

        # A broker dies: fenced within the session timeout, its partitions led by others, epochs higher.
        victim = topics["orders"].partitions[0].leader
        led = {(name, p) for name, t in topics.items() for p, part in t.partitions.items() if part.leader == victim}
        assert led
        killed_at = time.monotonic()
        cluster.kill(victim, signal.SIGKILL)
        survivor = next(a for b, a in zip(BROKERS, addresses, strict=True) if b != victim)
        after = wait_until(f"broker {victim} fenced", lambda: (lambda m: victim not in m[0] and m)(metadata(survivor)),
                           timeout_s=SESSION_TIMEOUT_MS / 1000 + 20)
        fenced_after = time.monotonic() - killed_at
        assert fenced_after < SESSION_TIMEOUT_MS / 1000 + 10, fenced_after
        _, moved = after
        for name, p in led:
            before, now = topics[name].partitions[p], moved[name].partitions[p]
            assert now.leader != victim and now.leader_epoch > before.leader_epoch, (name, p, before, now)
            assert victim not in now.isr or now.leader == -1
        # librdkafka asks whichever broker it likes: each applies the fencing from the metadata log on its own
        # time (as Kafka's brokers do), so its view is waited for, bounded, rather than read once.
        confluent_view = wait_until(f"librdkafka's view without broker {victim}", lambda: (
            lambda view: victim not in view.brokers and view)(admin.list_topics(timeout=15)), timeout_s=30)
        assert confluent_view.topics["orders"].partitions[0].leader != victim

        # The active controller dies: another takes over with the metadata intact and keeps serving.
        cluster.kill(first.leader_id, signal.SIGKILL)
        wait_for_leader(lambda: [cluster.specs[n].address for n in (1, 2, 3) if n in cluster.alive()],
                        first.leader_id, 60.0)
        create(admin, NewTopic("audit", 2, 2))
        _, topics_now = wait_until("audit created after failover", lambda: (
            lambda m: "audit" in m[1] and m)(metadata(survivor)))
        for name in ("orders", "payments"):
            assert topics_now[name].topic_id == topics[name].topic_id
            assert topics_now[name].topic_epoch == topics[name].topic_epoch
        assert topics_now["audit"].topic_epoch > max(t.topic_epoch for t in topics.values())

        # Deleted and created again under the same name: a new id and a higher topic epoch.
        for future in admin.delete_topics(["payments"], request_timeout=30).values():
            future.result(timeout=60)
        wait_until("payments deleted", lambda: "payments" not in metadata(survivor)[1])
        create(admin, NewTopic("payments", 3, 2))
        _, again = wait_until("payments created again", lambda: (
            lambda m: "payments" in m[1] and m)(metadata(survivor)))
        assert again["payments"].topic_id != topics["payments"].topic_id
        assert again["payments"].topic_epoch > topics_now["audit"].topic_epoch
    finally:
        cluster.stop()
