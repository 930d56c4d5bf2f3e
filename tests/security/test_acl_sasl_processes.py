"""ACLs with real principals (one secured 1+1 local cluster for the module: the controller on mutual
TLS, the broker on SASL_SSL with SCRAM): `allow.everyone.if.no.acl.found` false, the admin user and
the nodes' certificate principals super users, as `quorum local-cluster --security` runs and prints
it. The user alice, without ACLs, is refused producing,
consuming, committing, creating and deleting topics and creating ACLs, each with Kafka's error, and
is allowed once the admin grants her ACLs. A certificate of the cluster's CA that is not a node's
sends Vote on the controller listener: refused, never counted. On SASL_PLAINTEXT, whose sessions live
2 s (KIP-368), a confluent-kafka producer keeps producing across re-authentications. OAUTHBEARER
(issue 33): the token's subject is the principal the authorizer sees, and librdkafka re-authenticates
with fresh tokens before a session bound to a short-lived token ends.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from quorum.admin import describe_quorum
from quorum.launcher import LocalCluster
from quorum.net.client_security import ClientSecurity
from quorum.net.peer_client import PeerClient, PeerUnavailable
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS
from tests.security.test_acl_processes import admin_error, consumer_error
from tests.test_controller_processes import create, wait_until

pytestmark = pytest.mark.timeout(600)

WAIT_S = 90.0
QUIET = {"log_level": 0}
REAUTH_MS = 2000
SETTINGS = {"offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "2",
            "group.initial.rebalance.delay.ms": "0",
            # KIP-368 on the one listener no other test here uses: a SASL session lives 2 s
            "listener.name.sasl_plaintext.connections.max.reauth.ms": str(REAUTH_MS)}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("acl-sasl"), controllers=1, brokers=1, settings=SETTINGS,
                           security=True, authorizer=True)  # as `quorum local-cluster --security` runs
    cluster.format_storage()
    cluster.start(timeout=WAIT_S)
    try:
        yield cluster
    finally:
        cluster.stop()


class LogLines(logging.Handler):
    """A librdkafka `logger`'s messages, kept in order (its debug lines say when it re-authenticated)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def log_lines(prefix: str) -> tuple[LogLines, logging.Logger]:
    """A fresh logger for a librdkafka client and the handler that keeps what it logs."""
    lines = LogLines()
    logger = logging.getLogger(f"{prefix}-{uuid.uuid4().hex[:6]}")
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    return lines, logger


def client(cluster: LocalCluster, user: str, **more: str) -> dict[str, str]:
    return {**cluster.client_settings("SASL_SSL", user=user, mechanism="SCRAM-SHA-512"), **QUIET, **more}


def allow(name: str, operation: AclOperation, kind=ResourceType.TOPIC) -> AclBinding:
    return AclBinding(kind, name, ResourcePatternType.LITERAL, "User:alice", "*", operation, AclPermissionType.ALLOW)


def produce(cluster: LocalCluster, topic: str) -> set:
    producer = Producer(client(cluster, "alice", **{"message.timeout.ms": "20000"}))
    errors: list = []
    for n in range(3):
        producer.produce(topic, f"m{n}".encode(), on_delivery=lambda error, _: errors.append(error))
    assert producer.flush(WAIT_S) == 0
    return {None if error is None else error.code() for error in errors}


def first_consumer_outcome(cluster: LocalCluster, topic: str, group: str) -> int | None:
    """The first error alice's group consumer meets, or None once it read a record."""
    return consumer_error(client(cluster, "alice", **{"group.id": group}), topic, WAIT_S)


def test_alice_is_refused_until_the_admin_grants_her_acls(cluster) -> None:
    admin, alice = AdminClient(client(cluster, "admin")), AdminClient(client(cluster, "alice"))
    topic, group = f"orders-{uuid.uuid4().hex[:6]}", f"billing-{uuid.uuid4().hex[:6]}"
    create(admin, NewTopic(topic, 1, 1))
    assert produce(cluster, topic) == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
    assert first_consumer_outcome(cluster, topic, group) in (KafkaError.GROUP_AUTHORIZATION_FAILED,
                                                             KafkaError.TOPIC_AUTHORIZATION_FAILED)
    assert admin_error(alice.create_topics([NewTopic(f"mine-{topic}", 1, 1)], request_timeout=WAIT_S)) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert admin_error(alice.delete_topics([topic], request_timeout=WAIT_S)) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert admin_error(alice.create_acls([allow(topic, AclOperation.ALL)], request_timeout=WAIT_S)) == \
        KafkaError.CLUSTER_AUTHORIZATION_FAILED

    assert admin_error(admin.create_acls([allow(group, AclOperation.READ, ResourceType.GROUP)],
                                      request_timeout=WAIT_S)) is None
    wait_until("alice's group to be allowed, her topic still refused",
               lambda: first_consumer_outcome(cluster, topic, group) == KafkaError.TOPIC_AUTHORIZATION_FAILED,
               timeout_s=WAIT_S)
    granted = [allow(topic, AclOperation.WRITE), allow(topic, AclOperation.READ)]
    assert admin_error(admin.create_acls(granted, request_timeout=WAIT_S)) is None
    wait_until("alice's produce to be allowed", lambda: produce(cluster, topic) == {None}, timeout_s=WAIT_S)
    assert first_consumer_outcome(cluster, topic, group) is None
    consumer = Consumer(client(cluster, "alice", **{"group.id": group}))
    try:
        [committed] = consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        assert committed.error is None
    finally:
        consumer.close()


def printed(cluster: LocalCluster, label: str) -> dict[str, str]:
    """One line of what `quorum local-cluster --security` prints (`label`: "admin settings (SASL_SSL)", ...)."""
    [line] = [line for line in cluster.client_lines() if line.startswith(label + ": ")]
    return dict(item.split("=", 1) for item in line.split(": ", 1)[1].split())


def test_the_printed_settings_make_an_admin_who_may_and_an_alice_who_may_not(cluster, tmp_path) -> None:
    """The admin's printed librdkafka settings create a topic; alice's printed kafka-python settings are
    refused producing to it (TOPIC_AUTHORIZATION_FAILED); the admin's printed --command-config file
    works with `quorum get-offsets` on the SSL listener (the tools' certificate, a super user)."""
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    topic = f"printed-{uuid.uuid4().hex[:6]}"
    create(AdminClient({**printed(cluster, "admin settings (SASL_SSL)"), **QUIET}), NewTopic(topic, 1, 1))
    options = printed(cluster, "client kafka-python (SASL_SSL)")
    assert options["sasl_plain_username"] == "alice"
    producer = KafkaProducer(max_block_ms=int(WAIT_S * 1000), **options)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(topic, b"refused").get(timeout=WAIT_S)
    finally:
        producer.close(timeout=10)
    [line] = [line for line in cluster.client_lines() if line.startswith("admin --command-config (SSL): ")]
    offsets = subprocess.run([sys.executable, "-m", "quorum.cli", "get-offsets", "--bootstrap-server",
                              cluster.bootstrap("SSL"), "--topic", topic, "--command-config",
                              line.split(": ", 1)[1]], capture_output=True, text=True, timeout=WAIT_S)
    assert offsets.returncode == 0 and f"{topic}:0:0" in offsets.stdout, offsets.stdout + offsets.stderr


def test_a_producer_keeps_producing_across_reauthentications(cluster) -> None:
    """KIP-368 with a real client: on a listener whose SASL sessions live REAUTH_MS, librdkafka (>= 2.2)
    re-authenticates before each session ends; a producer sending one record at a time across several
    re-authentications has every record delivered (a session past its lifetime would be closed instead)."""
    lines, logger = log_lines("reauth")
    topic = f"reauth-{uuid.uuid4().hex[:6]}"
    create(AdminClient(client(cluster, "admin")), NewTopic(topic, 1, 1))
    settings = {**cluster.client_settings("SASL_PLAINTEXT", user="admin", mechanism="PLAIN"),
                "debug": "security", "logger": logger, "message.timeout.ms": "30000"}
    producer = Producer(settings)
    errors: list = []
    sent = 0

    def reauthenticated() -> int:
        producer.poll(0)
        return sum("Auth in state REAUTH" in line for line in lines.lines)  # librdkafka's line as it starts one

    def produce_one() -> bool:
        nonlocal sent
        producer.produce(topic, f"r{sent}".encode(), on_delivery=lambda error, _: errors.append(error))
        sent += 1
        assert producer.flush(WAIT_S) == 0, f"record {sent} of {topic} undelivered"
        return reauthenticated() >= 3

    wait_until(f"3 re-authentications of a producer of {topic} on SASL_PLAINTEXT (sessions of {REAUTH_MS} ms)",
               produce_one, timeout_s=WAIT_S)
    assert errors == [None] * sent
    assert consumer_error(client(cluster, "admin", **{"group.id": f"check-{topic}"}), topic, WAIT_S) is None


def test_a_vote_from_a_certificate_that_is_not_a_super_user_is_refused_and_never_counted(cluster) -> None:
    """A client with a certificate of the cluster's own CA (so TLS accepts it) that is not one of the
    nodes' principals sends Vote for a higher epoch on the controller listener: CLUSTER_AUTHORIZATION_FAILED,
    and the quorum's leader and epoch stay as they were."""
    intruder = cluster.security.ca.issue(f"intruder-{uuid.uuid4().hex[:6]}")
    before = describe(cluster)
    schema = APIS[52].request
    vote = schema(version=2, cluster_id=None, voter_id=1, topics=[schema.TopicData(
        topic_name="__cluster_metadata", partitions=[schema.TopicData.PartitionData(
            partition_index=0, replica_epoch=before.leader_epoch + 5, replica_id=99, last_offset_epoch=10**6,
            last_offset=10**9)])])
    security = ClientSecurity.of_client_properties({"security.protocol": "SSL",
                                                    "ssl.ca.location": str(cluster.security.ca.cert_path),
                                                    "ssl.certificate.location": str(intruder.pem)})

    async def ask():
        host, _, port = controller(cluster).rpartition(":")
        peer = PeerClient(host, int(port), "intruder", 30_000, security=security)
        try:
            return await peer.request(APIS[52], 2, vote)
        finally:
            await peer.close()

    answer = asyncio.run(ask())
    assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and not answer.topics
    after = describe(cluster)
    assert (after.leader_id, after.leader_epoch) == (before.leader_id, before.leader_epoch)


def controller(cluster: LocalCluster) -> str:
    return next(spec.address for spec in cluster.specs.values() if spec.role == "controller")


def describe(cluster: LocalCluster):
    """The quorum's status, asked with the tools' certificate (a super user)."""
    settings = {"security.protocol": "SSL", "ssl.ca.location": str(cluster.security.ca.cert_path),
                "ssl.certificate.location": str(cluster.security.tool)}
    return asyncio.run(describe_quorum(controller(cluster), 30_000, ClientSecurity.of_client_properties(settings)))


def test_no_principal_writes_the_metadata_log_on_the_secured_listeners(cluster) -> None:
    """Issue 38: Produce to `__cluster_metadata` is served on no listener of a cluster without the
    test setting, whatever the principal: the tools' certificate (a super user) on the controller's
    mutual-TLS listener has its connection closed, as Kafka's controller listener does (Produce is
    not one of its APIs), and the admin user on the broker's SASL_SSL listener is answered
    UNKNOWN_TOPIC_OR_PARTITION, as Kafka's broker answers for a topic its metadata does not hold."""
    from tests.server.test_pending_writes_processes import produce_body

    tools = ClientSecurity.of_client_properties({"security.protocol": "SSL",
                                                 "ssl.ca.location": str(cluster.security.ca.cert_path),
                                                 "ssl.certificate.location": str(cluster.security.tool)})
    admin_settings = client(cluster, "admin")
    admin = ClientSecurity.of_client_properties(admin_settings)
    before = describe(cluster)

    async def produce(address: str, security: ClientSecurity):
        host, _, port = address.rpartition(":")
        peer = PeerClient(host, int(port), "metadata-writer", 30_000, security=security)
        try:
            answer = await peer.request(APIS[0], 9, produce_body([b"forged"]))
            return answer.responses[0].partition_responses[0].error_code
        except PeerUnavailable as exc:
            return exc
        finally:
            await peer.close()

    assert isinstance(asyncio.run(produce(controller(cluster), tools)), PeerUnavailable)
    sasl_ssl = admin_settings["bootstrap.servers"].split(",")[0]  # the broker's SASL_SSL listener
    assert asyncio.run(produce(sasl_ssl, admin)) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    after = describe(cluster)
    assert after.leader_id == before.leader_id, "the controller stopped serving"


def _oauth_client(cluster: LocalCluster, oauth_cb, **more: object) -> dict[str, object]:
    """librdkafka's OAUTHBEARER settings over SASL_SSL with `oauth_cb` giving the tokens."""
    settings = {k: v for k, v in cluster.client_settings("SASL_SSL", mechanism="OAUTHBEARER").items()
                if not k.startswith(("enable.sasl", "sasl.oauthbearer"))}
    return {**settings, "oauth_cb": oauth_cb, **QUIET, **more}


def _tokens(sub: str, life_s: float, calls: list | None = None):
    """A confluent-kafka oauth_cb giving unsecured tokens naming `sub` with the cluster's required scope."""
    import time

    from quorum.security.local_cluster import OAUTH_SCOPE
    from quorum.wire.oauthbearer import unsecured_token

    def oauth_cb(config: object) -> tuple[str, float]:
        if calls is not None:
            calls.append(config)
        now = time.time()
        return unsecured_token(sub, now, life_s, (OAUTH_SCOPE,)), now + life_s

    return oauth_cb


def test_an_oauthbearer_tokens_subject_is_the_principal_the_authorizer_sees(cluster) -> None:
    """OAUTHBEARER's principal is User:<sub>: a token naming alice (no ACLs) is refused producing
    (TOPIC_AUTHORIZATION_FAILED); one naming admin (a super user) produces."""
    topic = f"oauth-acl-{uuid.uuid4().hex[:6]}"
    create(AdminClient(client(cluster, "admin")), NewTopic(topic, 1, 1))
    outcomes = {}
    for sub in ("alice", "admin"):
        producer = Producer(_oauth_client(cluster, _tokens(sub, 600), **{"message.timeout.ms": "20000"}))
        delivered: list = []
        producer.produce(topic, sub.encode(), on_delivery=lambda error, _, got=delivered: got.append(error))
        assert producer.flush(WAIT_S) == 0
        outcomes[sub] = None if delivered[0] is None else delivered[0].code()
    assert outcomes == {"alice": KafkaError.TOPIC_AUTHORIZATION_FAILED, "admin": None}


def test_librdkafka_reauthenticates_before_its_short_lived_tokens_expire(cluster) -> None:
    """KIP-368 bound to the token: on SASL_SSL (no connections.max.reauth.ms) a token living 10 s makes a
    session of at most 10 s; librdkafka refreshes its token (oauth_cb, served by poll and flush, at 80% of
    its life) and re-authenticates before the session ends, and a producer sending across several
    re-authentications has every record delivered. (With 3 s, and on a loaded machine 5 s, tokens
    librdkafka sometimes re-authenticated with its expired token before the poll that refreshes it, 10%
    of the life being too short a margin: refused invalid_token, as Kafka refuses it.)"""
    lines, logger = log_lines("oauth-reauth")
    topic = f"oauth-reauth-{uuid.uuid4().hex[:6]}"
    create(AdminClient(client(cluster, "admin")), NewTopic(topic, 1, 1))
    calls: list = []
    producer = Producer(_oauth_client(cluster, _tokens("admin", 10, calls), debug="security", logger=logger,
                                      **{"message.timeout.ms": "30000", "log_level": 7}))
    errors: list = []
    sent = 0

    def produce_one() -> bool:
        nonlocal sent
        producer.produce(topic, f"t{sent}".encode(), on_delivery=lambda error, _: errors.append(error))
        sent += 1
        assert producer.flush(WAIT_S) == 0, f"record {sent} of {topic} undelivered"
        return sum("Auth in state REAUTH" in line for line in lines.lines) >= 2

    wait_until(f"2 re-authentications of a producer of {topic} whose OAUTHBEARER tokens live 10 s",
               produce_one, timeout_s=WAIT_S)
    assert errors == [None] * sent
    assert len(calls) >= 2 and not any("SASL authentication error" in line for line in lines.lines)


def test_kafka_python_reauthenticates_with_its_token_providers_new_tokens(cluster) -> None:
    """kafka-python (3.x does KIP-368) with `client_epochs.kafka_python.UnsecuredTokenProvider` making 5 s
    tokens: it re-authenticates before each token-bound session ends, with the provider's new token, and
    every record of a producer sending across two re-authentications is delivered."""
    import logging

    from kafka import KafkaProducer

    from client_epochs.kafka_python import UnsecuredTokenProvider
    from quorum.security.local_cluster import OAUTH_SCOPE

    class Lines(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.lines: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.lines.append(record.getMessage())

    lines = Lines()
    logger = logging.getLogger("kafka.net.connection")
    logger.addHandler(lines)
    level = logger.level
    logger.setLevel(logging.DEBUG)
    topic = f"oauth-kp-{uuid.uuid4().hex[:6]}"
    create(AdminClient(client(cluster, "admin")), NewTopic(topic, 1, 1))
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap("SASL_SSL"), security_protocol="SASL_SSL",
        ssl_cafile=str(cluster.security.ca.cert_path), sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=UnsecuredTokenProvider(f"principal=admin scope={OAUTH_SCOPE} lifeSeconds=5"))
    try:
        def produce_one() -> bool:
            producer.send(topic, b"k").get(timeout=WAIT_S)  # raises what a failed delivery failed with
            return sum("Beginning SASL re-authentication" in line for line in lines.lines) >= 2

        wait_until(f"2 re-authentications of a kafka-python producer of {topic} (5 s OAUTHBEARER tokens)",
                   produce_one, timeout_s=WAIT_S)
        assert not any("re-authentication failed" in line for line in lines.lines), lines.lines
    finally:
        producer.close(timeout=10)
        logger.removeHandler(lines)
        logger.setLevel(level)


def test_the_sdks_connections_reauthenticate_on_a_listener_with_connections_max_reauth_ms(cluster) -> None:
    """KIP-368 for the SDK's own connections with SCRAM too: on SASL_PLAINTEXT (sessions of 2 s)
    one connection keeps being served for 5 s, re-authenticating on the same socket before each session
    ends (before this change it ignored the lifetime and the broker closed it at its first request past
    2 s: "connection closed after 0 of 4 bytes")."""
    import time

    from client_epochs.connection import BrokerConnection
    from client_epochs.metadata_client import METADATA, _metadata_request

    for mechanism in ("SCRAM-SHA-512",):  # PLAIN goes the same way (sasl_steps returns any mechanism's lifetime)
        settings = cluster.client_settings("SASL_PLAINTEXT", user="alice", mechanism=mechanism)
        host, _, port = settings["bootstrap.servers"].split(",")[0].rpartition(":")
        connection = BrokerConnection(host, int(port), f"reauth-{mechanism}",
                                      security=ClientSecurity.of_client_properties(settings))
        try:
            deadline = time.monotonic() + 2.5 * REAUTH_MS / 1000
            while time.monotonic() < deadline:
                assert connection.request(METADATA, 12, _metadata_request([], 12), time.monotonic() + WAIT_S)
                time.sleep(0.25)
            assert connection.reauthentications >= 2 and connection.is_open, mechanism
        finally:
            connection.close()


def test_a_flow_whose_target_refuses_to_create_its_topics_stops_before_copying(cluster, tmp_path) -> None:
    """Issue 32: an mm2.properties flow into a cluster where its user (alice, no ACLs) may not create
    topics: one line naming the topic and Kafka's error, exit status 2, nothing created or copied."""
    create(AdminClient(client(cluster, "admin")), NewTopic("mm2-permission", 1, 1))

    def cluster_lines(alias: str, user: str) -> list[str]:
        settings = cluster.client_settings("SASL_SSL", user=user, mechanism="SCRAM-SHA-512")
        return [f"{alias}.{key} = {value}" for key, value in settings.items()]

    config = tmp_path / "mm2.properties"
    config.write_text("\n".join(["clusters = A, B", *cluster_lines("A", "admin"), *cluster_lines("B", "alice"),
                                 "A->B.enabled = true", "A->B.topics = mm2-permission",
                                 "emit.heartbeats.enabled = false", "emit.checkpoints.enabled = false"]) + "\n")
    done = subprocess.run([sys.executable, "-m", "client_epochs.mirror.cli", "--config", str(config)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("client-epochs-mirror: error: the target refused creating target topic "
                            "A.mm2-permission") and "TOPIC_AUTHORIZATION_FAILED" in error, done.stderr
    listed = AdminClient(client(cluster, "admin")).list_topics(timeout=30).topics
    assert "A.mm2-permission" not in listed


def test_a_vote_from_a_node_outside_the_voter_set_is_answered_inconsistent_voter_set(cluster) -> None:
    """Issue 38: a Vote that passes the authorizer (the tools' certificate, a super user) from node 99,
    which is not in controller.quorum.voters, is answered as Kafka 3.x answers it
    (validateVoterOnlyRequest: INCONSISTENT_VOTER_SET in the partition), and changes nothing."""
    before = describe(cluster)
    schema = APIS[52].request
    vote = schema(version=2, cluster_id=None, voter_id=1, topics=[schema.TopicData(
        topic_name="__cluster_metadata", partitions=[schema.TopicData.PartitionData(
            partition_index=0, replica_epoch=before.leader_epoch + 5, replica_id=99, last_offset_epoch=1,
            last_offset=10**9)])])
    tools = ClientSecurity.of_client_properties({"security.protocol": "SSL",
                                                 "ssl.ca.location": str(cluster.security.ca.cert_path),
                                                 "ssl.certificate.location": str(cluster.security.tool)})

    async def ask():
        host, _, port = controller(cluster).rpartition(":")
        peer = PeerClient(host, int(port), "non-voter", 30_000, security=tools)
        try:
            return await peer.request(APIS[52], 2, vote)
        finally:
            await peer.close()

    answer = asyncio.run(ask())
    (partition,) = answer.topics[0].partitions
    assert answer.error_code == ErrorCode.NONE and partition.error_code == ErrorCode.INCONSISTENT_VOTER_SET
    assert not partition.vote_granted
    after = describe(cluster)
    assert (after.leader_id, after.leader_epoch) == (before.leader_id, before.leader_epoch)


def test_a_fetch_whose_partitions_are_all_refused_is_answered_at_once(cluster) -> None:
    """Issue 38: alice (no READ ACL) fetches with MaxWaitMs 20 s: every partition is answered
    TOPIC_AUTHORIZATION_FAILED at once, as Kafka's ReplicaManager answers a fetch left with nothing to
    read, not after the 20 s a long poll of readable partitions may take. (A functional check of
    waiting, with a margin of 10 s: the old handler answered after the full MaxWaitMs.)"""
    create(AdminClient(client(cluster, "admin")), NewTopic("fetch-refused", 2, 1))
    settings = client(cluster, "alice")
    schema = APIS[1].request
    topic = schema.FetchTopic(topic="fetch-refused", topic_id=None, partitions=[
        schema.FetchTopic.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                                         log_start_offset=-1, partition_max_bytes=1 << 20) for p in (0, 1)])
    body = schema(replica_id=-1, max_wait_ms=20_000, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
                  session_epoch=-1, topics=[topic], forgotten_topics_data=[], rack_id="")

    async def fetch():
        host, _, port = settings["bootstrap.servers"].split(",")[0].rpartition(":")
        security = ClientSecurity.of_client_properties(settings)
        peer = PeerClient(host, int(port), "alice-fetch", 60_000, security=security)
        try:
            started = time.monotonic()
            answer = await peer.request(APIS[1], 12, body)
            return answer, time.monotonic() - started
        finally:
            await peer.close()

    answer, took_s = asyncio.run(fetch())
    codes = {p.partition_index: p.error_code for t in answer.responses for p in t.partitions}
    assert codes == {0: ErrorCode.TOPIC_AUTHORIZATION_FAILED, 1: ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    assert took_s < 10, f"answered after {took_s:.1f} s: the refused fetch waited out MaxWaitMs"
