"""Issue 18 with real processes and real clients: one 3+3 local cluster started with security (the
controllers on mutual TLS, every broker on SSL, SASL_SSL and SASL_PLAINTEXT), shared by every test.

confluent-kafka, kafka-python and kcat produce, consume in a group and commit over SSL, SASL_SSL
with SCRAM-SHA-512 and SASL_PLAINTEXT with PLAIN; and the refusals: a wrong password or an unknown
user (SASL_AUTHENTICATION_FAILED, then the connection is closed), a plaintext client on a TLS port
and a TLS client on a plaintext port (closed; the node keeps serving), an expired or untrusted
client certificate on the controller listener. OAUTHBEARER (issue 33, Kafka's unsecured tokens): both
wrappers and the replicator with their own connections, Kafka's refusals of an expired or unscoped
token, a session bound to its token's expiry.
"""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import ssl
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from quorum.admin import QuorumToolError, describe_quorum
from quorum.launcher import LocalCluster
from quorum.net.client_security import ClientSecurity, SaslLogin, sasl_login
from quorum.net.peer_client import PeerClient, PeerUnavailable
from quorum.security.certificates import CertificateAuthority
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS
from tests.test_controller_processes import create, wait_until

pytestmark = pytest.mark.timeout(600)

WAIT_S = 90.0
QUIET = {"log_level": 0}
SETTINGS = {"offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "3",
            "group.initial.rebalance.delay.ms": "0"}
CLIENTS = [("SSL", None), ("SASL_SSL", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "PLAIN")]
API_VERSIONS = APIS[18]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("secured"), controllers=3, brokers=3, settings=SETTINGS,
                           security=True)
    cluster.format_storage()
    cluster.start(timeout=WAIT_S)
    try:
        yield cluster
    finally:
        cluster.stop()


def settings_of(cluster: LocalCluster, protocol: str, mechanism: str | None, **more: str) -> dict[str, str]:
    return {**cluster.client_settings(protocol, mechanism=mechanism or "SCRAM-SHA-512"), **QUIET, **more}


def new_topic(cluster: LocalCluster, protocol: str, mechanism: str | None) -> str:
    name = f"secured-{protocol.lower()}-{uuid.uuid4().hex[:8]}"
    create(AdminClient(settings_of(cluster, protocol, mechanism)), NewTopic(name, 3, 3))
    return name


@pytest.mark.parametrize(("protocol", "mechanism"), CLIENTS)
def test_confluent_kafka_produces_consumes_in_a_group_and_commits(cluster, protocol, mechanism):
    topic = new_topic(cluster, protocol, mechanism)
    producer = Producer(settings_of(cluster, protocol, mechanism, **{"acks": "all"}))
    for n in range(30):
        producer.produce(topic, f"m{n}".encode())
    assert producer.flush(WAIT_S) == 0
    group = f"group-{uuid.uuid4().hex[:8]}"
    consumer = Consumer(settings_of(cluster, protocol, mechanism, **{
        "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": "false"}))
    try:
        consumer.subscribe([topic])
        got: list[bytes] = []

        def read() -> bool:
            for message in consumer.consume(30, 1.0):
                assert message.error() is None, message.error()
                got.append(message.value())
            return len(got) >= 30

        wait_until(f"30 records of {topic} over {protocol} in group {group}", read, timeout_s=WAIT_S)
        assert sorted(got) == sorted(f"m{n}".encode() for n in range(30))
        consumer.commit(asynchronous=False)
        committed = consumer.committed(consumer.assignment(), timeout=WAIT_S)
        assert sum(max(tp.offset, 0) for tp in committed) == 30
    finally:
        consumer.close()


@pytest.mark.parametrize(("protocol", "mechanism"), CLIENTS)
def test_kafka_python_produces_consumes_in_a_group_and_commits(cluster, protocol, mechanism):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = new_topic(cluster, protocol, mechanism)
    options = {"bootstrap_servers": cluster.bootstrap(protocol), "security_protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        options["ssl_cafile"] = str(cluster.security.ca.cert_path)
    if mechanism is not None:
        options.update(sasl_mechanism=mechanism, sasl_plain_username="alice",
                       sasl_plain_password=cluster.security.passwords["alice"])
    producer = KafkaProducer(acks="all", **options)
    sent = [producer.send(topic, f"k{n}".encode(), partition=n % 3) for n in range(20)]
    for future in sent:
        future.get(timeout=WAIT_S)  # raises what a failed delivery failed with
    producer.close()
    group = f"kp-{uuid.uuid4().hex[:8]}"
    consumer = KafkaConsumer(topic, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                             **options)
    try:
        got: list[bytes] = []

        def read() -> bool:
            for records in consumer.poll(1000).values():
                got.extend(record.value for record in records)
            return len(got) >= 20

        wait_until(f"20 records of {topic} with kafka-python over {protocol}", read, timeout_s=WAIT_S)
        consumer.commit()
        assert sum(consumer.committed(TopicPartition(topic, p)) or 0 for p in range(3)) == 20
    finally:
        consumer.close()


@pytest.mark.parametrize(("protocol", "mechanism"), CLIENTS)
def test_kcat_produces_and_consumes_in_a_group(cluster, kcat, protocol, mechanism):
    topic = new_topic(cluster, protocol, mechanism)
    options = [arg for key, value in settings_of(cluster, protocol, mechanism).items()
               if key not in ("log_level",) for arg in ("-X", f"{key}={value}")]
    lines = "".join(f"kc{n}\n" for n in range(10))
    subprocess.run([kcat, *options, "-P", "-t", topic], input=lines, text=True, check=True, timeout=WAIT_S)
    group = f"kcat-{uuid.uuid4().hex[:8]}"
    consumed = subprocess.run([kcat, *options, "-X", "auto.offset.reset=earliest", "-G", group, "-e",
                               "-f", "%s\n", topic], capture_output=True, text=True, timeout=WAIT_S)
    assert sorted(consumed.stdout.split()) == sorted(f"kc{n}" for n in range(10)), consumed.stderr
    consumer = Consumer(settings_of(cluster, protocol, mechanism, **{"group.id": group}))
    try:
        from confluent_kafka import TopicPartition

        committed = consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=WAIT_S)
        assert sum(max(tp.offset, 0) for tp in committed) == 10
    finally:
        consumer.close()


# -- refusals --------------------------------------------------------------------------------


def _address(cluster: LocalCluster, protocol: str) -> tuple[str, int]:
    host, _, port = cluster.bootstrap(protocol).split(",")[0].rpartition(":")
    return host, int(port)


def _api_versions(host: str, port: int, security: ClientSecurity) -> object:
    async def ask() -> object:
        client = PeerClient(host, port, "security-test", 30_000, security=security)
        try:
            return await client.request(API_VERSIONS, 3, API_VERSIONS.request(client_software_name="t",
                                                                              client_software_version="1"))
        finally:
            await client.close()

    return asyncio.run(ask())


def _sasl_ssl(cluster: LocalCluster, login: SaslLogin | None) -> ClientSecurity:
    return ClientSecurity(ClientSecurity.of_client_properties(cluster.security.client_settings("SSL")).ssl_context,
                          login)


def _refused_login(cluster: LocalCluster, host: str, port: int, login: SaslLogin) -> tuple[int, bytes]:
    """Log in with `login` over SASL_SSL, expecting a refusal: SaslAuthenticate's last error code and
    what the broker sent after it (b"" once it closed the connection)."""

    async def attempt() -> tuple[int, bytes]:
        context = _sasl_ssl(cluster, None).ssl_context
        reader, writer = await asyncio.open_connection(host, port, ssl=context, server_hostname=host)
        answers: list[int] = []
        correlation = iter(range(1, 100))

        async def exchange(api, version, body):
            from quorum.wire.framing import RequestHeader
            from quorum.wire.protocol import decode_response, encode_request

            writer.write(encode_request(api, RequestHeader(api.key, version, next(correlation), "t"), body))
            await writer.drain()
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            answer = decode_response(api, version, await reader.readexactly(size))[1]
            answers.append(answer.error_code)
            return answer

        with pytest.raises(ConnectionError, match="SASL_AUTHENTICATION_FAILED"):
            await sasl_login(exchange, login)
        rest = await asyncio.wait_for(reader.read(), WAIT_S)  # EOF: the broker closed the connection
        writer.close()
        return answers[-1], rest

    return asyncio.run(attempt())


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize(("user", "password"), [("alice", "not-her-password"), ("mallory", "anything")])
def test_wrong_password_or_unknown_user_is_refused_then_closed(cluster, mechanism, user, password):
    """SaslAuthenticate answers SASL_AUTHENTICATION_FAILED, then the broker closes the connection."""
    host, port = _address(cluster, "SASL_SSL")
    code, rest = _refused_login(cluster, host, port, SaslLogin(mechanism, user, password))
    assert code == ErrorCode.SASL_AUTHENTICATION_FAILED and rest == b""
    assert _api_versions(host, port, _sasl_ssl(cluster, SaslLogin(mechanism, "alice",
                                                                  cluster.security.passwords["alice"])))


def test_confluent_kafka_with_a_wrong_password_fails_authentication(cluster):
    errors: list = []
    admin = AdminClient({**cluster.client_settings("SASL_SSL"), "sasl.password": "wrong", **QUIET,
                         "error_cb": errors.append})

    def refused() -> bool:
        admin.poll(0.5)  # serves error_cb
        return any(error.code() == KafkaError._AUTHENTICATION for error in errors)

    wait_until("librdkafka's authentication error for a wrong SCRAM password", refused, timeout_s=WAIT_S)
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=1)


def _closed_after(host: str, port: int, first_bytes: bytes) -> bytes:
    """Send `first_bytes` and read until the node closes the connection (what it sent back)."""
    with socket.create_connection((host, port), timeout=WAIT_S) as sock:
        sock.sendall(first_bytes)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


def test_plaintext_client_on_a_tls_port_is_closed_and_the_node_keeps_serving(cluster):
    host, port = _address(cluster, "SSL")
    api_versions = struct.pack(">ihhi", 4 + 2 + 2 + 4 + 2, 18, 0, 1) + struct.pack(">h", -1)
    assert b"\x16\x03" not in _closed_after(host, port, api_versions)[:1]  # no answer: at most a TLS alert
    assert _api_versions(host, port, ClientSecurity.of_client_properties(cluster.security.client_settings("SSL")))


def test_tls_client_on_a_plaintext_port_is_closed_and_the_node_keeps_serving(cluster):
    host, port = _address(cluster, "SASL_PLAINTEXT")
    context = ssl.create_default_context(cafile=str(cluster.security.ca.cert_path))
    with (socket.create_connection((host, port), timeout=WAIT_S) as raw,
          pytest.raises((ssl.SSLError, ConnectionError)),
          context.wrap_socket(raw, server_hostname=host)):
        pass
    login = SaslLogin("PLAIN", "alice", cluster.security.passwords["alice"])
    assert _api_versions(host, port, ClientSecurity(None, login))


def _controller(cluster: LocalCluster) -> str:
    return next(spec.address for spec in cluster.specs.values() if spec.role == "controller")


def _describe(cluster: LocalCluster, certificate: str | None, ca: str | None = None) -> object:
    settings = {"security.protocol": "SSL", "ssl.ca.location": ca or str(cluster.security.ca.cert_path)}
    if certificate is not None:
        settings["ssl.certificate.location"] = certificate
    return asyncio.run(describe_quorum(_controller(cluster), 30_000, ClientSecurity.of_client_properties(settings)))


@pytest.mark.parametrize("certificate", ["none", "expired", "untrusted"])
def test_controller_listener_refuses_clients_without_a_valid_certificate(cluster, tmp_path, certificate):
    """Mutual TLS: no client certificate, an expired one, or one of another CA is refused; the
    controllers keep answering a client with a good one."""
    if certificate == "expired":
        path = str(cluster.security.ca.issue(f"expired-{uuid.uuid4().hex[:6]}", days=-1).pem)
    elif certificate == "untrusted":
        path = str(CertificateAuthority(tmp_path / "other-ca").issue("stranger").pem)
    else:
        path = None
    log_path = next(s.log_path for s in cluster.specs.values() if s.address == _controller(cluster))
    logged_before = len(log_path.read_text().splitlines())
    with pytest.raises((PeerUnavailable, OSError, QuorumToolError)):
        _describe(cluster, path)
    # Issue 38: the refusal is logged at the handshake, naming why (OpenSSL's own reason).
    reason = {"none": "peer did not return a certificate", "expired": "certificate has expired",
              "untrusted": "certificate verify failed"}[certificate]
    wait_until(f"the controller's log to name the refusal ({reason})", lambda: any(
        "TLS handshake failed" in line and reason in line
        for line in log_path.read_text().splitlines()[logged_before:]))
    status = _describe(cluster, str(cluster.security.tool))
    assert status.leader_id in {spec.node_id for spec in cluster.specs.values() if spec.role == "controller"}


def test_printed_client_settings_work_and_describe_takes_a_command_config(cluster, tmp_path):
    """What `quorum local-cluster --security sasl_ssl` prints is enough for a client; `quorum describe`
    reaches the mutual-TLS controllers with `--command-config`, and fails cleanly without it."""
    lines = cluster.client_lines()
    assert lines[0].startswith("client settings (SASL_SSL): ")
    settings = dict(item.split("=", 1) for item in lines[0].split(": ", 1)[1].split())
    assert settings["sasl.mechanism"] == "SCRAM-SHA-512"
    assert AdminClient({**settings, **QUIET}).list_topics(timeout=WAIT_S).brokers.keys() == {101, 102, 103}
    assert "bootstrap servers (SASL_SSL): " + cluster.bootstrap("SASL_SSL") in cluster.ready_line()
    config = tmp_path / "tools.properties"
    config.write_text(f"security.protocol=SSL\nssl.ca.location={cluster.security.ca.cert_path}\n"
                      f"ssl.certificate.location={cluster.security.tool}\n", encoding="utf-8")
    describe = [sys.executable, "-m", "quorum.cli", "describe", "--bootstrap-controller", _controller(cluster),
                "--status"]
    done = subprocess.run([*describe, "--command-config", str(config)], capture_output=True, text=True,
                          timeout=WAIT_S)
    assert done.returncode == 0 and "LeaderId" in done.stdout, done.stderr
    refused = subprocess.run(describe, capture_output=True, text=True, timeout=WAIT_S)
    assert refused.returncode == 1 and refused.stderr.startswith("error: "), refused.stderr
    # the broker tools take the same --command-config: get-offsets over SASL_SSL (SCRAM-SHA-512)
    topic = new_topic(cluster, "SASL_SSL", "SCRAM-SHA-512")
    producer = Producer(settings_of(cluster, "SASL_SSL", "SCRAM-SHA-512"))
    for _ in range(5):
        producer.produce(topic, b"x", partition=1)
    assert producer.flush(WAIT_S) == 0
    sasl = tmp_path / "sasl.properties"
    sasl.write_text("".join(f"{k}={v}\n" for k, v in settings.items() if k != "bootstrap.servers"), encoding="utf-8")
    offsets = subprocess.run([sys.executable, "-m", "quorum.cli", "get-offsets", "--bootstrap-server",
                              cluster.bootstrap("SASL_SSL"), "--topic", topic, "--command-config", str(sasl)],
                             capture_output=True, text=True, timeout=WAIT_S)
    assert offsets.returncode == 0 and f"{topic}:1:5" in offsets.stdout.split(), offsets.stderr


# -- the SDK's own connections ------------------------------------------------------------------


def _epochs(cluster: LocalCluster, topic: str, security: ClientSecurity) -> tuple[int, int]:
    from client_epochs import MetadataClient
    from client_epochs import TopicPartition as Key

    with MetadataClient(cluster.bootstrap("SASL_SSL"), security=security) as client:
        meta = client.fetch([topic], timeout=WAIT_S).partitions[Key(topic, 0)]
    return meta.topic_epoch, meta.leader_epoch


def test_the_sdk_connects_as_the_users_client_does(cluster):
    """client_epochs' own connections (metadata, offsets, log bounds) take the user's security settings:
    without them a SASL_SSL listener refuses them; with librdkafka's or kafka-python's names they work."""
    from client_epochs import MetadataClient, MetadataUnavailableError
    from client_epochs.connection import BrokerError

    with pytest.raises((BrokerError, ConnectionError)), MetadataClient(cluster.bootstrap("SASL_SSL")) as bare:
        bare.fetch([], timeout=10)
    settings = cluster.client_settings("SASL_SSL")
    from_librdkafka = ClientSecurity.of_client_properties(settings)
    from_kafka_python = ClientSecurity.of_kafka_python({
        "security_protocol": "SASL_SSL", "ssl_cafile": settings["ssl.ca.location"], "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice", "sasl_plain_password": settings["sasl.password"]})
    for security in (from_librdkafka, from_kafka_python):
        with MetadataClient(cluster.bootstrap("SASL_SSL"), security=security) as client:
            assert set(client.fetch([], timeout=WAIT_S).brokers) == {101, 102, 103}
    # a wrong password is not retried until the deadline (Kafka's AuthenticationException is not retriable)
    # and the error names the refused login, not a bare deadline
    wrong = ClientSecurity.of_client_properties({**settings, "sasl.password": "wrong"})
    with pytest.raises(MetadataUnavailableError, match="SASL login refused.*SASL_AUTHENTICATION_FAILED"), \
            MetadataClient(cluster.bootstrap("SASL_SSL"), security=wrong) as refused:
        refused.refresh_until_current(["any"], timeout=10 * WAIT_S)


def test_wrapped_consumers_commit_and_seek_with_kip_232_epochs_over_sasl_ssl(cluster):
    """Both wrappers commit the KIP-232 internal metadata and read it back over SASL_SSL (SCRAM-SHA-512):
    their epoch checks ran on connections of their own, secured with the consumer's settings."""
    from kafka.structs import TopicPartition as KpTopicPartition

    from client_epochs import TopicPartition as Key
    from client_epochs.confluent import Consumer as WrappedConsumer
    from client_epochs.kafka_python import KafkaConsumer as WrappedKafkaConsumer
    from quorum.wire.internal_metadata import InternalMetadata

    topic = new_topic(cluster, "SASL_SSL", "SCRAM-SHA-512")
    producer = Producer(settings_of(cluster, "SASL_SSL", "SCRAM-SHA-512"))
    for n in range(10):
        producer.produce(topic, f"w{n}".encode(), partition=0)
    assert producer.flush(WAIT_S) == 0
    settings = settings_of(cluster, "SASL_SSL", "SCRAM-SHA-512")
    topic_epoch, leader_epoch = _epochs(cluster, topic, ClientSecurity.of_client_properties(settings))
    group = f"wrapped-{uuid.uuid4().hex[:8]}"
    consumer = WrappedConsumer({**settings, "group.id": group, "enable.auto.commit": False,
                                "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        got: list = []

        def read() -> bool:
            for message in consumer.consume(10, 1.0):
                assert message.error() is None, message.error()
                got.append(message)
            return len(got) >= 10

        wait_until(f"10 records of {topic} through the wrapped confluent-kafka consumer", read, timeout_s=WAIT_S)
        consumer.commit(asynchronous=False)
        stored = consumer.committed_internal_metadata([Key(topic, 0)])
    finally:
        consumer.close()
    assert stored[Key(topic, 0)].topic_epoch == topic_epoch and stored[Key(topic, 0)].leader_epoch == leader_epoch
    kp = WrappedKafkaConsumer(
        bootstrap_servers=cluster.bootstrap("SASL_SSL"), group_id=group, enable_auto_commit=False,
        security_protocol="SASL_SSL", ssl_cafile=settings["ssl.ca.location"], sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="alice", sasl_plain_password=settings["sasl.password"])
    try:
        tp = KpTopicPartition(topic, 0)
        kp.assign([tp])
        kp.seek(tp, 4, stored[Key(topic, 0)].to_json())  # KIP-232's seek with internal metadata
        records: list = []
        wait_until(f"{topic} from offset 4 through the wrapped kafka-python consumer",
                   lambda: records.extend(r for rs in kp.poll(1000).values() for r in rs) or len(records) >= 6,
                   timeout_s=WAIT_S)
        assert records[0].offset == 4
        offset, internal = kp.position_with_internal_metadata(tp)
        assert offset == 10 and InternalMetadata.from_json(internal).topic_epoch == topic_epoch
    finally:
        kp.close()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "OAUTHBEARER"])
def test_the_replicator_copies_from_a_sasl_ssl_source(cluster, tmp_path, mechanism):
    """`client-epochs-mirror` with the source consumer's SASL_SSL settings (--consumer-property; OAUTHBEARER:
    librdkafka's unsecured sasl.oauthbearer.config): its own metadata, offset and log-bounds connections
    to the source use them too; every record reaches a (plaintext) target and the group's commits carry
    the KIP-232 internal metadata."""
    from client_epochs import TopicPartition as Key
    from client_epochs.confluent import Consumer as WrappedConsumer

    topic = new_topic(cluster, "SASL_SSL", "SCRAM-SHA-512")
    producer = Producer(settings_of(cluster, "SASL_SSL", "SCRAM-SHA-512"))
    for n in range(60):
        producer.produce(topic, f"r{n}".encode(), partition=n % 3)
    assert producer.flush(WAIT_S) == 0
    target = LocalCluster(tmp_path / "target", controllers=1, brokers=1, settings={
        "offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "1"})
    target.format_storage()
    target.start(timeout=WAIT_S)
    try:
        settings = cluster.client_settings("SASL_SSL", mechanism=mechanism)
        group = f"mirror-{uuid.uuid4().hex[:8]}"
        source = settings.pop("bootstrap.servers")
        command = [sys.executable, "-m", "client_epochs.mirror.cli", "--source-bootstrap", source,
                   "--target-bootstrap", target.bootstrap_servers, "--topics", topic, "--group", group,
                   "--stop-after-idle-s", "5", "--give-up-after-s", str(WAIT_S)]
        for key, value in settings.items():
            command += ["--consumer-property", f"{key}={value}"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=4 * WAIT_S)
        assert done.returncode == 0, done.stdout + done.stderr
        reader = Consumer({"bootstrap.servers": target.bootstrap_servers, "group.id": "check", **QUIET,
                           "auto.offset.reset": "earliest"})
        try:
            reader.subscribe([topic])
            copied: list[bytes] = []

            def read() -> bool:
                copied.extend(m.value() for m in reader.consume(60, 1.0) if m.error() is None)
                return len(copied) >= 60

            wait_until(f"the 60 records of {topic} on the target", read, timeout_s=WAIT_S)
        finally:
            reader.close()
        assert sorted(copied) == sorted(f"r{n}".encode() for n in range(60))
        checker = WrappedConsumer({**cluster.client_settings("SASL_SSL", mechanism=mechanism), "group.id": group,
                                   **QUIET})
        try:
            stored = checker.committed_internal_metadata([Key(topic, p) for p in range(3)])
        finally:
            checker.close()
        assert len(stored) == 3 and all(internal.topic_epoch >= 1 for internal in stored.values())
    finally:
        target.stop()


@pytest.fixture(scope="module")
def spark_session():
    """One local Spark session for the module's Spark reads: its start is the dearest part of each."""
    pytest.importorskip("pyspark")
    from client_epochs.spark import SHORT_LIVED_JVM, local_session

    session = local_session("kafka-epochs-secured", jvm_options=SHORT_LIVED_JVM)
    yield session
    session.stop()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "OAUTHBEARER"])
def test_the_spark_source_reads_a_sasl_ssl_topic_with_its_own_connections_authenticated(cluster, spark_session,
                                                                                        mechanism):
    """The `kafka_epochs` Spark source given the user's SASL_SSL settings as `kafka.*` options (as Spark's
    Kafka source takes them) reads every record a producer wrote: the driver's own metadata and log-bounds
    connections and the executors' consumers log in with them (the listener serves nothing before a SCRAM
    login). With a wrong password (OAUTHBEARER: a token without the required scope) the read fails, naming
    the refused login."""
    topic = new_topic(cluster, "SASL_SSL", "SCRAM-SHA-512")
    producer = Producer(settings_of(cluster, "SASL_SSL", "SCRAM-SHA-512", **{"acks": "all"}))
    for n in range(90):
        producer.produce(topic, f"s{n}".encode(), partition=n % 3)
    assert producer.flush(WAIT_S) == 0
    settings = cluster.client_settings("SASL_SSL", mechanism=mechanism)
    options = {f"kafka.{key}": value for key, value in settings.items()}

    def read(**more: str) -> list:
        reader = spark_session.read.format("kafka_epochs").option("subscribe", topic)
        for key, value in {**options, **more}.items():
            reader = reader.option(key, value)
        return reader.load().select("partition", "value").collect()

    rows = read()
    assert sorted(bytes(row.value) for row in rows) == sorted(f"s{n}".encode() for n in range(90))
    assert {row.partition for row in rows} == {0, 1, 2}
    wrong = ({"kafka.sasl.password": "wrong"} if mechanism != "OAUTHBEARER" else
             {"kafka.sasl.oauthbearer.config": "principal=alice scope=other"})
    with pytest.raises(Exception, match="SASL login refused.*SASL_AUTHENTICATION_FAILED"):
        read(**wrong)


# -- OAUTHBEARER (issue 33): Kafka's unsecured tokens -------------------------------------------------


def _oauth(cluster: LocalCluster, **more: object) -> dict[str, object]:
    """alice's librdkafka settings for OAUTHBEARER over SASL_SSL, as `quorum local-cluster` prints them."""
    return {**cluster.client_settings("SASL_SSL", mechanism="OAUTHBEARER"), **QUIET, **more}


def _token_cb(sub: str = "alice", life_s: float = 600, scope: tuple[str, ...] = ("kafka",), exp_shift_s: float = 0,
              calls: list | None = None):
    """A confluent-kafka `oauth_cb` giving unsecured tokens; `exp_shift_s` moves the token's own `exp`
    (not the expiry the callback reports, which librdkafka requires in the future)."""
    from quorum.wire.oauthbearer import unsecured_token

    def oauth_cb(config: object) -> tuple[str, float, str, dict[str, str]]:
        if calls is not None:
            calls.append(config)
        now = time.time()
        token = unsecured_token(sub, now, life_s, scope)
        if exp_shift_s:
            token = unsecured_token(sub, now - 2 * abs(exp_shift_s), abs(exp_shift_s), scope)
        return token, now + life_s, sub, {"traceId": "t1"}

    return oauth_cb


def test_wrapped_consumers_consume_and_commit_with_oauthbearer(cluster):
    """The confluent-kafka wrapper with an `oauth_cb` and the kafka-python wrapper with a token provider read
    a topic over SASL_SSL with OAUTHBEARER and commit the KIP-232 internal metadata: their own metadata,
    offset and log-bounds connections took their tokens as the wrapped clients do (the listener serves
    nothing before a login)."""
    from kafka.structs import TopicPartition as KpTopicPartition

    from client_epochs import TopicPartition as Key
    from client_epochs.confluent import Consumer as WrappedConsumer
    from client_epochs.kafka_python import KafkaConsumer as WrappedKafkaConsumer
    from client_epochs.kafka_python import UnsecuredTokenProvider

    topic = new_topic(cluster, "SASL_SSL", "SCRAM-SHA-512")
    producer = Producer(_oauth(cluster))  # librdkafka's own unsecured tokens, from sasl.oauthbearer.config
    for n in range(10):
        producer.produce(topic, f"o{n}".encode(), partition=0)
    assert producer.flush(WAIT_S) == 0
    calls: list = []
    settings = {k: v for k, v in _oauth(cluster).items() if not k.startswith(("enable.sasl", "sasl.oauthbearer"))}
    group = f"oauth-{uuid.uuid4().hex[:8]}"
    consumer = WrappedConsumer({**settings, "oauth_cb": _token_cb(calls=calls), "sasl.oauthbearer.config": "cfg",
                                "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        got: list = []

        def read() -> bool:
            for message in consumer.consume(10, 1.0):
                assert message.error() is None, message.error()
                got.append(message.value())
            return len(got) >= 10

        wait_until(f"10 records of {topic} through the wrapped confluent-kafka consumer on OAUTHBEARER", read,
                   timeout_s=WAIT_S)
        consumer.commit(asynchronous=False)
        stored = consumer.committed_internal_metadata([Key(topic, 0)])
    finally:
        consumer.close()
    assert sorted(got) == sorted(f"o{n}".encode() for n in range(10))
    assert stored[Key(topic, 0)].topic_epoch >= 1 and set(calls) == {"cfg"}
    kp = WrappedKafkaConsumer(bootstrap_servers=cluster.bootstrap("SASL_SSL"), group_id=group,
                              enable_auto_commit=False, security_protocol="SASL_SSL",
                              ssl_cafile=str(cluster.security.ca.cert_path), sasl_mechanism="OAUTHBEARER",
                              sasl_oauth_token_provider=UnsecuredTokenProvider("principal=alice scope=kafka"))
    try:
        tp = KpTopicPartition(topic, 0)
        kp.assign([tp])
        kp.seek(tp, 4, stored[Key(topic, 0)].to_json())  # KIP-232's seek: waits on the SDK's own metadata
        records: list = []
        wait_until(f"{topic} from offset 4 through the wrapped kafka-python consumer on OAUTHBEARER",
                   lambda: records.extend(r for rs in kp.poll(1000).values() for r in rs) or len(records) >= 6,
                   timeout_s=WAIT_S)
        assert records[0].offset == 4
        kp.commit()
        assert kp.committed_internal_metadata([Key(topic, 0)])[Key(topic, 0)].topic_epoch >= 1
    finally:
        kp.close()


def test_the_printed_oauthbearer_settings_work_for_librdkafka_and_kafka_python(cluster):
    """What `quorum local-cluster --security sasl_ssl` prints for OAUTHBEARER (shell-quoted) is enough: the
    librdkafka line lists the brokers, the kafka-python line's token provider gets kafka-python in."""
    import importlib
    import shlex

    from kafka import KafkaConsumer

    lines = {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in cluster.client_lines()}
    librdkafka = dict(item.split("=", 1) for item in shlex.split(lines["client oauthbearer (SASL_SSL)"]))
    assert librdkafka["sasl.oauthbearer.config"] == "principal=alice scope=kafka"
    assert AdminClient({**librdkafka, **QUIET}).list_topics(timeout=WAIT_S).brokers.keys() == {101, 102, 103}
    options = dict(item.split("=", 1) for item in shlex.split(lines["client oauthbearer kafka-python (SASL_SSL)"]))
    provider = re.fullmatch(r"([\w.]+)\.(\w+)\('([^']*)'\)", options.pop("sasl_oauth_token_provider"))
    assert provider is not None
    options["sasl_oauth_token_provider"] = getattr(importlib.import_module(provider[1]), provider[2])(provider[3])
    topic = new_topic(cluster, "SASL_SSL", "SCRAM-SHA-512")
    consumer = KafkaConsumer(**options)
    try:
        assert topic in consumer.topics()  # a Metadata answer: served only after the OAUTHBEARER login
    finally:
        consumer.close()


def _oauth_exchange(cluster: LocalCluster, message: bytes) -> tuple[list[tuple[int, str | None, bytes]], bytes]:
    """OAUTHBEARER by hand over SASL_SSL: `message`, then \\x01 after a challenge. Each SaslAuthenticate
    answer (error code, message, bytes), and what the broker sent after the last (b"": it closed)."""
    from quorum.wire.framing import RequestHeader
    from quorum.wire.protocol import decode_response, encode_request

    host, port = _address(cluster, "SASL_SSL")
    context = _sasl_ssl(cluster, None).ssl_context
    assert context is not None
    with socket.create_connection((host, port), timeout=WAIT_S) as raw, \
            context.wrap_socket(raw, server_hostname=host) as sock:
        def exchange(api, version, body, correlation):
            sock.sendall(encode_request(api, RequestHeader(api.key, version, correlation, "t"), body))
            size = struct.unpack(">i", _read(sock, 4))[0]
            return decode_response(api, version, _read(sock, size))[1]

        handshake, authenticate = APIS[17], APIS[36]
        assert exchange(handshake, 1, handshake.request(mechanism="OAUTHBEARER"), 1).error_code == 0
        answers = []
        for correlation, token in enumerate([message, b"\x01"], start=2):
            answer = exchange(authenticate, 1, authenticate.request(auth_bytes=token), correlation)
            answers.append((answer.error_code, answer.error_message, bytes(answer.auth_bytes or b"")))
            if answer.error_code or not answer.auth_bytes:
                break
        rest = b""
        while chunk := sock.recv(65536):
            rest += chunk
        return answers, rest


def _read(sock: ssl.SSLSocket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {size} bytes")
        data += chunk
    return data


@pytest.mark.parametrize(("token_kind", "expected"), [
    ("expired", '{"status":"invalid_token"}'),
    ("without the scope", '{"status":"insufficient_scope", "scope":"[kafka]"}'),
])
def test_an_expired_or_unscoped_token_is_refused_with_kafkas_error_json(cluster, token_kind, expected):
    """As Kafka's broker: the error JSON as a SaslAuthenticate challenge (no error yet), the client's \\x01,
    then SASL_AUTHENTICATION_FAILED carrying the JSON, and the connection closed. librdkafka reports it
    (error_cb), and the SDK's own connections fail with it, not retried."""
    from client_epochs import MetadataClient, MetadataUnavailableError
    from quorum.wire.oauthbearer import ClientFirst

    oauth_cb = _token_cb(exp_shift_s=30) if token_kind == "expired" else _token_cb(scope=("other",))
    token, *_ = oauth_cb(None)
    answers, rest = _oauth_exchange(cluster, ClientFirst(token).to_bytes())
    assert answers == [(0, None, expected.encode()), (ErrorCode.SASL_AUTHENTICATION_FAILED, expected, b"")]
    assert rest == b""
    errors: list = []
    settings = {k: v for k, v in _oauth(cluster).items() if not k.startswith(("enable.sasl", "sasl.oauthbearer"))}
    admin = AdminClient({**settings, "oauth_cb": oauth_cb, "error_cb": errors.append})

    def refused() -> bool:
        admin.poll(0.5)  # serves error_cb
        return any(error.code() == KafkaError._AUTHENTICATION and expected in error.str() for error in errors)

    wait_until(f"librdkafka's authentication error naming {expected}", refused, timeout_s=WAIT_S)
    security = ClientSecurity.of_client_properties({**settings, "oauth_cb": oauth_cb})
    with pytest.raises(MetadataUnavailableError, match=re.escape(f"SASL_AUTHENTICATION_FAILED: {expected}")), \
            MetadataClient(cluster.bootstrap("SASL_SSL"), security=security) as client:
        client.refresh_until_current(["any"], timeout=WAIT_S)


def test_the_sdks_connection_reauthenticates_before_its_tokens_session_ends(cluster):
    """The session of an OAUTHBEARER login ends at the token's exp (this listener has no
    connections.max.reauth.ms): the broker gives its lifetime, the SDK's connection re-authenticates with
    a new token before it ends and keeps being served on the same socket; a connection that does not
    re-authenticate is closed by the broker at its first request past the token's expiry."""
    from client_epochs.connection import BrokerConnection, BrokerError
    from client_epochs.metadata_client import METADATA, _metadata_request

    calls: list = []
    settings = {k: v for k, v in _oauth(cluster).items() if not k.startswith(("enable.sasl", "sasl.oauthbearer"))}
    security = ClientSecurity.of_client_properties({**settings, "oauth_cb": _token_cb(life_s=2, calls=calls)})
    host, port = _address(cluster, "SASL_SSL")
    metadata, body = METADATA, _metadata_request([], 12)
    connection = BrokerConnection(host, port, "oauth-reauth", security=security)
    try:
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:  # three token lifetimes
            assert connection.request(metadata, 12, body, time.monotonic() + WAIT_S).brokers
            time.sleep(0.25)
        assert connection.reauthentications >= 2 and connection.is_open and len(calls) >= 3
    finally:
        connection.close()
    lapsing = BrokerConnection(host, port, "oauth-no-reauth", security=security)
    try:
        assert lapsing.request(metadata, 12, body, time.monotonic() + WAIT_S).brokers
        lapsing._reauthenticate_at = None  # as a client that ignores the session lifetime
        time.sleep(2.5)
        with pytest.raises(BrokerError, match="connection closed"):
            lapsing.request(metadata, 12, body, time.monotonic() + WAIT_S)
    finally:
        lapsing.close()


# -- SCRAM users in the metadata log ---------------------------------------------------------


def _logs_in(host: str, port: int, security: ClientSecurity) -> bool:
    try:
        return bool(_api_versions(host, port, security))
    except (PeerUnavailable, OSError, ConnectionError):
        return False


def test_scram_users_are_managed_with_the_admin_client_and_kept_in_the_metadata_log(cluster):
    """AlterUserScramCredentials creates a user (confluent-kafka's UserScramCredentialUpsertion), who then
    produces over SASL_SSL with SCRAM-SHA-512; DescribeUserScramCredentials lists it; a broker restarted
    (SIGTERM, start) still knows it; once deleted, a new connection with it is refused."""
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    user, password = f"carol-{uuid.uuid4().hex[:6]}", "carol-secret"
    admin = AdminClient(settings_of(cluster, "SASL_SSL", "SCRAM-SHA-512"))
    upsertion = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                             password.encode())
    for future in admin.alter_user_scram_credentials([upsertion]).values():
        assert future.result(WAIT_S) is None
    described: list[object] = []

    def describe() -> bool:  # the broker asked answers from its image, which may be a moment behind
        [future] = admin.describe_user_scram_credentials([user]).values()
        try:
            described.append(future.result(WAIT_S))
        except KafkaException as exc:
            assert exc.args[0].code() == KafkaError.RESOURCE_NOT_FOUND, exc
            return False
        return True

    wait_until(f"DescribeUserScramCredentials listing {user}", describe, timeout_s=WAIT_S)
    assert [(info.mechanism, info.iterations) for info in described[-1].scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 8192)]
    carol = {**settings_of(cluster, "SASL_SSL", "SCRAM-SHA-512"), "sasl.username": user, "sasl.password": password}
    topic = new_topic(cluster, "SASL_SSL", "SCRAM-SHA-512")
    producer = Producer({**carol, "acks": "all"})
    for n in range(10):
        producer.produce(topic, f"c{n}".encode())
    assert producer.flush(WAIT_S) == 0  # librdkafka retries a login refused by a broker not caught up yet

    host, port = _address(cluster, "SASL_SSL")
    [broker] = [spec.node_id for spec in cluster.specs.values() if spec.extra_ports.get("SASL_SSL") == port]
    login = _sasl_ssl(cluster, SaslLogin("SCRAM-SHA-512", user, password))
    cluster.kill(broker, signal.SIGTERM)
    cluster.start_node(broker)
    wait_until(f"{user} logging in with SCRAM-SHA-512 on broker {broker} restarted (its log and snapshot)",
               lambda: _logs_in(host, port, login), timeout_s=WAIT_S)

    deletion = UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)
    for future in admin.alter_user_scram_credentials([deletion]).values():
        assert future.result(WAIT_S) is None
    wait_until(f"broker {broker} refusing {user} once deleted", lambda: not _logs_in(host, port, login),
               timeout_s=WAIT_S)
    code, rest = _refused_login(cluster, host, port, SaslLogin("SCRAM-SHA-512", user, password))
    assert code == ErrorCode.SASL_AUTHENTICATION_FAILED and rest == b""
    wait_until(f"DescribeUserScramCredentials not listing {user} once deleted", lambda: not describe(),
               timeout_s=WAIT_S)


def test_the_kip_232_mirror_scenario_runs_over_sasl_ssl(cluster, tmp_path):
    """benchmarks.mirror_scenario's KAFKA-6262 scenario with this cluster as a SASL_SSL source (SCRAM-SHA-512
    for the paced producer, the probes and the client_epochs replicator, whose wrapped consumer and own
    metadata, offset and log-bounds connections all log in): partition 0's leader killed with kill -9 twice
    and the replicator killed and restarted while records flow. The target holds every source record, none
    rewound or misplaced, and the group's commits reach the source's ends. Runs last in this module: it
    kills and restarts brokers of the shared cluster."""
    from benchmarks.mirror_scenario import Plan, run_against, start_cluster

    target = LocalCluster(tmp_path / "target", controllers=1, brokers=1, settings={
        "offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "1"})
    start_cluster(target, (101,))
    try:
        client = {k: v for k, v in cluster.client_settings("SASL_SSL").items() if k != "bootstrap.servers"}
        result = run_against("client_epochs", Plan(records=3000, rate=300), tmp_path / "scenario", cluster, target,
                             "SASL_SSL", client)
    finally:
        target.stop()
    figures = result.figures
    assert (figures.missing, figures.rewinds, figures.misplaced) == (0, 0, 0), (figures, result.notes)
    assert figures.distinct == 3000
    assert not result.notes[3:], result.notes  # the three events' notes only: commits reached the ends, exit 0
    [kill] = [note for note in result.notes if note.startswith("replicator kill")]
    assert "the target held 0 " not in kill, kill  # killed mid-copy, so its restart resumes, never rewinds
