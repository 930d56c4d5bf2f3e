"""TLS and SASL on an in-process listener, with the node's own client (PeerClient): the principal each
handler sees, the APIs served before authentication, and Kafka's ssl.* settings with errors naming
the key. The real-process, real-client side is tests/security/test_secured_cluster_processes.py."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quorum.net.client_security import ClientSecurity, SaslLogin, node_client_security
from quorum.net.dispatch import Dispatcher, Reply
from quorum.net.peer_client import PeerClient, PeerUnavailable
from quorum.net.secure_connection import ListenerSecurity, register_sasl_outside_authentication
from quorum.security.certificates import CertificateAuthority
from quorum.security.principal import RequestContext, request_context
from quorum.security.scram import make_credential
from quorum.security.tls import SslSettings, certificate_principal
from quorum.server.config import ConfigError, node_config
from quorum.server.listener import KafkaListener
from quorum.wire.protocol import APIS

METADATA = APIS[3]


def no_topics():
    """A Metadata v12 request for no topic (what each test connection asks once logged in)."""
    return METADATA.request(topics=[], allow_auto_topic_creation=False, include_topic_authorized_operations=False)

USERS = 'user_alice="alice-pw"'
SCRAM_USERS = {("alice", "SCRAM-SHA-256"): make_credential("SCRAM-SHA-256", "alice-pw")}
"""alice's SCRAM credential as a node's image would hold it."""


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    ca = CertificateAuthority(tmp_path_factory.mktemp("ca"))
    return ca, ca.issue("node-1"), ca.issue("client-1")


def props_of(pki, **more: str) -> dict[str, str]:
    ca, node, _ = pki
    return {"ssl.keystore.location": str(node.pem), "ssl.truststore.location": str(ca.cert_path),
            "listener.name.sasl_ssl.plain.sasl.jaas.config": f"x.PlainLoginModule required {USERS};",
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": "x.ScramLoginModule required;",
            "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config":
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
            **more}


def served(props: dict[str, str], name: str, protocol: str, calls: list[RequestContext]):
    """A listener serving Metadata (recording each request's context) with `name`'s security."""
    dispatcher = Dispatcher()
    register_sasl_outside_authentication(dispatcher)

    async def metadata(request) -> Reply:
        calls.append(request_context())
        return Reply(METADATA.response(brokers=[], topics=[]), request.version)

    dispatcher.register(3, metadata)
    return KafkaListener(dispatcher, security=ListenerSecurity.of(props, name, protocol, lambda: SCRAM_USERS))


def ask_metadata(listener_security, client_security: ClientSecurity, calls) -> list[RequestContext]:
    async def run() -> None:
        listener = served(*listener_security, calls)
        await listener.start()
        client = PeerClient("127.0.0.1", listener.port, "test", 30_000, security=client_security)
        try:
            await client.request(METADATA, 12, no_topics())
        finally:
            await client.close()
            await listener.close()

    asyncio.run(run())
    return calls


def tls_client(pki, certificate: bool) -> ClientSecurity:
    ca, _, client = pki
    settings = {"security.protocol": "SSL", "ssl.ca.location": str(ca.cert_path)}
    if certificate:
        settings["ssl.certificate.location"] = str(client.pem)
    return ClientSecurity.of_client_properties(settings)


def test_ssl_principal_is_the_certificate_subject_or_anonymous(pki):
    props = props_of(pki, **{"ssl.client.auth": "requested"})
    [with_cert] = ask_metadata((props, "SSL", "SSL"), tls_client(pki, True), [])
    assert str(with_cert.principal) == "User:CN=client-1,O=quorum"
    assert (with_cert.listener_name, with_cert.security_protocol, with_cert.client_host) == ("SSL", "SSL", "127.0.0.1")
    [without] = ask_metadata((props, "SSL", "SSL"), tls_client(pki, False), [])
    assert str(without.principal) == "User:ANONYMOUS"


def test_required_client_auth_refuses_a_client_without_a_certificate(pki):
    props = props_of(pki, **{"ssl.client.auth": "required"})
    calls: list[RequestContext] = []
    with pytest.raises(PeerUnavailable):
        ask_metadata((props, "SSL", "SSL"), tls_client(pki, False), calls)
    assert calls == []


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_sasl_principal_is_the_user(pki, mechanism):
    security = ClientSecurity(tls_client(pki, False).ssl_context, SaslLogin(mechanism, "alice", "alice-pw"))
    [context] = ask_metadata((props_of(pki), "SASL_SSL", "SASL_SSL"), security, [])
    assert str(context.principal) == "User:alice" and context.security_protocol == "SASL_SSL"


def test_a_request_before_sasl_authentication_closes_the_connection(pki):
    calls: list[RequestContext] = []
    with pytest.raises(PeerUnavailable):
        ask_metadata((props_of(pki), "SASL_SSL", "SASL_SSL"), tls_client(pki, False), calls)
    assert calls == []


def test_ssl_settings_errors_name_the_key(pki, tmp_path):
    ca, node, _ = pki
    with pytest.raises(ConfigError, match="ssl.keystore.location.*required"):
        SslSettings.of({}, "SSL").server_context()
    with pytest.raises(ConfigError, match="listener.name.ssl.ssl.keystore.location: no such file"):
        missing = {"listener.name.ssl.ssl.keystore.location": str(tmp_path / "missing.pem")}
        SslSettings.of(missing, "SSL").server_context()
    (tmp_path / "junk.pem").write_text("not a certificate")
    with pytest.raises(ConfigError, match="ssl.keystore.location: not a PEM"):
        SslSettings.of({"ssl.keystore.location": str(tmp_path / "junk.pem")}, "SSL").server_context()
    with pytest.raises(ConfigError, match="ssl.truststore.location: not PEM"):
        SslSettings.of({"ssl.truststore.location": str(tmp_path / "junk.pem")}, "SSL").client_context()
    with pytest.raises(ConfigError, match="ssl.client.auth=required needs a truststore"):
        SslSettings.of({"ssl.keystore.location": str(node.pem), "ssl.client.auth": "required"}, "SSL").server_context()
    with pytest.raises(ConfigError, match="ssl.client.auth must be"):
        SslSettings.of({"ssl.client.auth": "sometimes"}, "SSL")
    with pytest.raises(ConfigError, match="only PEM keystores"):
        SslSettings.of({"ssl.keystore.type": "JKS"}, "SSL")
    # per-listener settings win, as Kafka's listener.name.<name>.ssl.* do
    inline = {"listener.name.ssl.ssl.keystore.location": str(tmp_path / "missing.pem"),
              "listener.name.controller.ssl.keystore.certificate.chain": node.cert.read_text(),
              "listener.name.controller.ssl.keystore.key": node.key.read_text()}
    SslSettings.of(inline, "CONTROLLER").server_context()


def test_certificate_principal_is_rfc_2253():
    subject = ((("countryName", "DE"),), (("organizationName", "A, B"),), (("commonName", "node+1"),))
    assert str(certificate_principal({"subject": subject})) == "User:CN=node\\+1,O=A\\, B,C=DE"
    assert certificate_principal({}) is None


BASE = {"process.roles": "broker", "node.id": "101", "controller.quorum.voters": "1@127.0.0.1:9093",
        "log.dirs": "/tmp/x"}


def test_listener_security_config():
    config = node_config({**BASE, "listeners": "SSL://127.0.0.1:9092,SASL_SSL://127.0.0.1:9094",
                          "advertised.listeners": "SSL://kafka-1:19092", "inter.broker.listener.name": "SASL_SSL"})
    assert config.security_protocol("SASL_SSL") == "SASL_SSL"
    assert config.client_endpoint().name == "SASL_SSL"
    assert (config.advertised("SSL").host, config.advertised("SSL").port) == ("kafka-1", 19092)
    assert config.advertised("SASL_SSL").port == 9094
    with pytest.raises(ConfigError, match="no security protocol for listener 'CLIENT'"):
        node_config({**BASE, "listeners": "CLIENT://127.0.0.1:9092"})
    custom = node_config({**BASE, "listeners": "CLIENT://127.0.0.1:9092",
                          "listener.security.protocol.map": "CLIENT:SASL_SSL,CONTROLLER:SSL"})
    assert custom.security_protocol("CLIENT") == "SASL_SSL" and custom.controller_security_protocol() == "SSL"
    with pytest.raises(ConfigError, match="listener.security.protocol.map: expected NAME:PROTOCOL"):
        node_config({**BASE, "listeners": "CLIENT://127.0.0.1:9092", "listener.security.protocol.map": "CLIENT:TLS"})
    with pytest.raises(ConfigError, match="inter.broker.listener.name 'OTHER' is not in listeners"):
        node_config({**BASE, "listeners": "SSL://127.0.0.1:9092", "inter.broker.listener.name": "OTHER"})
    with pytest.raises(ConfigError, match="advertised.listeners names 'SASL_SSL'"):
        node_config({**BASE, "listeners": "SSL://127.0.0.1:9092", "advertised.listeners": "SASL_SSL://h:1"})


def test_node_logs_in_with_its_jaas_username(pki):
    config = node_config({**BASE, **props_of(pki), "listeners": "SASL_SSL://127.0.0.1:9092"})
    with pytest.raises(ConfigError, match="needs username and password"):
        node_client_security(config, "SASL_SSL", "sasl.mechanism.inter.broker.protocol")
    config = node_config({**BASE, **props_of(pki), "listeners": "SASL_SSL://127.0.0.1:9092",
                          "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
                          "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config":
                              'x.ScramLoginModule required username="alice" password="alice-pw";'})
    security = node_client_security(config, "SASL_SSL", "sasl.mechanism.inter.broker.protocol")
    assert security.sasl == SaslLogin("SCRAM-SHA-256", "alice", "alice-pw") and security.ssl_context is not None
    oauth = node_config({**BASE, **props_of(pki), "listeners": "SASL_SSL://127.0.0.1:9092",
                         "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER"})
    with pytest.raises(ConfigError, match="sasl.mechanism.inter.broker.protocol=OAUTHBEARER: a node logs in"):
        node_client_security(oauth, "SASL_SSL", "sasl.mechanism.inter.broker.protocol")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from([17, 36, 3]), st.sampled_from(["PLAIN", "SCRAM-SHA-256", "OAUTHBEARER", "X"]),
                          st.binary(max_size=120) | st.sampled_from([b"\x01", b"n,,\x01auth=Bearer a.b.\x01\x01"])),
                min_size=1, max_size=5))
def test_sasl_garbage_on_the_wire_never_authenticates_and_the_listener_keeps_serving(pki, steps):
    """Any sequence of SaslHandshake / SaslAuthenticate (garbage tokens) / Metadata on one connection: Metadata
    is never served to it, and a well-behaved client logs in on the same listener afterwards."""
    calls: list[RequestContext] = []
    from quorum.wire.framing import RequestHeader
    from quorum.wire.protocol import decode_response, encode_request

    async def run() -> None:
        listener = served(props_of(pki), "SASL_SSL", "SASL_PLAINTEXT", calls)
        await listener.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
            for correlation, (key, mechanism, token) in enumerate(steps, 1):
                api = APIS[key]
                body = (api.request(mechanism=mechanism) if key == 17 else
                        api.request(auth_bytes=token) if key == 36 else
                        api.request(topics=[], allow_auto_topic_creation=False,
                                    include_topic_authorized_operations=False))
                version = {17: 1, 36: 1, 3: 12}[key]
                writer.write(encode_request(api, RequestHeader(key, version, correlation, "fuzz"), body))
                try:
                    await writer.drain()
                    size = int.from_bytes(await reader.readexactly(4), "big")
                    decode_response(api, version, await reader.readexactly(size))
                except (asyncio.IncompleteReadError, ConnectionError):
                    break  # closed by the listener, as Kafka closes after a refusal
            writer.close()
            login = ClientSecurity(None, SaslLogin("PLAIN", "alice", "alice-pw"))
            client = PeerClient("127.0.0.1", listener.port, "after", 30_000, security=login)
            try:
                await client.request(METADATA, 12, no_topics())
            finally:
                await client.close()
        finally:
            await listener.close()

    asyncio.run(run())
    # only the well-behaved client's Metadata reached the handler (garbage cannot make a PLAIN login)
    assert [str(c.principal) for c in calls] == ["User:alice"]


def test_kip_368_a_session_past_its_lifetime_is_closed_unless_reauthenticated(pki):
    """connections.max.reauth.ms: SaslAuthenticate v1 answers the session lifetime; a request after it
    closes the connection, while one that re-authenticated first (same user) goes on being served."""
    from quorum.wire.framing import RequestHeader
    from quorum.wire.protocol import decode_response, encode_request
    from quorum.wire.sasl_client import sasl_steps

    props = props_of(pki, **{"connections.max.reauth.ms": "300"})
    calls: list[RequestContext] = []
    metadata = no_topics()

    async def run() -> tuple[list[int], bool, bool]:
        listener = served(props, "SASL_SSL", "SASL_PLAINTEXT", calls)
        await listener.start()
        lifetimes: list[int] = []
        try:
            async def connection():
                reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
                correlation = iter(range(1, 1000))

                async def exchange(api, version, body):
                    writer.write(encode_request(api, RequestHeader(api.key, version, next(correlation), "t"), body))
                    await writer.drain()
                    size = int.from_bytes(await reader.readexactly(4), "big")
                    answer = decode_response(api, version, await reader.readexactly(size))[1]
                    if api.key == 36:
                        lifetimes.append(answer.session_lifetime_ms)
                    return answer

                async def login() -> None:
                    steps, answer = sasl_steps(SaslLogin("SCRAM-SHA-256", "alice", "alice-pw")), None
                    with contextlib.suppress(StopIteration):
                        while True:
                            answer = await exchange(*steps.send(answer))

                return exchange, login, writer

            async def served_after_expiry(reauthenticate: bool) -> bool:
                exchange, login, writer = await connection()
                await login()
                await exchange(METADATA, 12, metadata)
                await asyncio.sleep(0.4)  # past the 300 ms session
                if reauthenticate:
                    await login()
                try:
                    await exchange(METADATA, 12, metadata)
                    return True
                except (asyncio.IncompleteReadError, ConnectionError):
                    return False
                finally:
                    writer.close()

            return lifetimes, await served_after_expiry(True), await served_after_expiry(False)
        finally:
            await listener.close()

    lifetimes, reauthenticated, expired = asyncio.run(run())
    assert set(lifetimes) == {0, 300}  # SCRAM's first step has no session yet; every completed login 300 ms
    assert reauthenticated and not expired
    assert len(calls) == 3


def test_ssl_principal_mapping_rules_as_kafka():
    from quorum.security.tls import parse_principal_rules

    subject = ((("organizationName", "quorum"),), (("commonName", "Node-1"),))
    rules = parse_principal_rules(r"RULE:^CN=(.*?),O=quorum$/$1/L,RULE:^CN=([^,]*),.*$/$1@other/,DEFAULT")
    assert str(certificate_principal({"subject": subject}, rules)) == "User:node-1"
    other = ((("organizationName", "elsewhere"),), (("commonName", "x"),))
    assert str(certificate_principal({"subject": other}, rules)) == "User:x@other"
    strict = parse_principal_rules(r"RULE:^CN=(.*?),O=quorum$/$1/")
    with pytest.raises(ValueError, match="no ssl.principal.mapping.rules rule maps"):
        certificate_principal({"subject": other}, strict)
    with pytest.raises(ConfigError, match="ssl.principal.mapping.rules: cannot read a rule"):
        parse_principal_rules("RULE:broken")
    settings = SslSettings.of({"listener.name.ssl.ssl.principal.mapping.rules": r"RULE:^CN=(.*?),.*$/$1/U"}, "SSL")
    assert str(certificate_principal({"subject": subject}, settings.principal_rules)) == "User:NODE-1"


def test_client_security_from_either_clients_settings(pki):
    ca, _, client = pki
    librdkafka = ClientSecurity.of_client_properties({
        "security.protocol": "sasl_ssl", "ssl.ca.location": str(ca.cert_path), "sasl.mechanisms": "SCRAM-SHA-256",
        "sasl.username": "u", "sasl.password": "p", "ssl.certificate.location": str(client.pem)})
    assert librdkafka.sasl == SaslLogin("SCRAM-SHA-256", "u", "p") and librdkafka.ssl_context is not None
    kafka_python = ClientSecurity.of_kafka_python({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                                                   "sasl_plain_username": "u", "sasl_plain_password": "p"})
    assert kafka_python.sasl == SaslLogin("PLAIN", "u", "p") and kafka_python.ssl_context is None
    assert not ClientSecurity.of_client_properties({}).secured
    with pytest.raises(ValueError, match="security.protocol must be"):
        ClientSecurity.of_client_properties({"security.protocol": "TLS"})
    with pytest.raises(ValueError, match="sasl.mechanism=GSSAPI is not supported"):
        ClientSecurity.of_client_properties({"security.protocol": "SASL_SSL"})  # librdkafka's default mechanism
