"""SASL mechanisms and a connection's SASL state, sans-IO: SCRAM against RFC 7677's test vector, PLAIN,
the session's rules (Kafka's errors, KIP-368 re-authentication and expiry), and hypothesis fuzzing:
garbage never raises anything but a refusal and never authenticates anyone."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.security.principal import KafkaPrincipal
from quorum.security.sasl import JaasConfig, SaslSession, SaslSettings
from quorum.security.scram import (
    ScramClient,
    ScramCredential,
    ScramError,
    ScramServer,
    decode_name,
    make_credential,
    parse_client_final,
    parse_client_first,
    salted_password,
)
from quorum.server.config import ConfigError
from quorum.wire.errors import ErrorCode

# RFC 7677 section 3
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="

PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret"}
JAAS = " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items())
PROPS = {
    "listener.name.sasl_ssl.plain.sasl.jaas.config":
        f'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="x" {JAAS};',
    "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
        "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config":
        "org.apache.kafka.common.security.scram.ScramLoginModule required;",
}
CREDENTIALS = {(user, mechanism): make_credential(mechanism, password)
               for user, password in PASSWORDS.items() for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")}
"""SCRAM users as a node's image holds them (UserScramCredentialRecords)."""
SETTINGS = SaslSettings.of(PROPS, "SASL_SSL", lambda: CREDENTIALS)


def rfc_credential() -> ScramCredential:
    return make_credential("SCRAM-SHA-256", "pencil", 4096, RFC_SALT)


def test_scram_sha_256_server_matches_rfc_7677():
    server = ScramServer("SCRAM-SHA-256", lambda user: rfc_credential() if user == "user" else None,
                         nonce=RFC_SERVER_NONCE)
    assert server.first(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert server.final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.user == "user"


def test_scram_sha_256_client_matches_rfc_7677():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == RFC_CLIENT_FIRST
    assert client.final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify(RFC_SERVER_FINAL)
    with pytest.raises(ScramError):
        client.verify(b"v=" + base64.b64encode(b"\0" * 32))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_refuses_a_wrong_password_a_wrong_nonce_and_replays(mechanism):
    credential = make_credential(mechanism, "right")

    def exchange(password: str, tamper=lambda final: final) -> bytes:
        client = ScramClient(mechanism, "alice", password)
        server = ScramServer(mechanism, lambda user: credential if user == "alice" else None)
        return server.final(tamper(client.final(server.first(client.first()))))

    assert exchange("right").startswith(b"v=")
    with pytest.raises(ScramError, match="invalid credentials"):
        exchange("wrong")
    with pytest.raises(ScramError, match="nonce"):
        exchange("right", lambda final: final.replace(b",r=", b",r=X", 1).replace(b",p=", b"Y,p=", 1))
    with pytest.raises(ScramError, match="channel binding"):
        exchange("right", lambda final: final.replace(b"c=biws", b"c=eSws", 1))
    # the proof of one exchange does not pass another (the server nonce differs)
    client = ScramClient(mechanism, "alice", "right")
    first_server = ScramServer(mechanism, lambda user: credential)
    final = client.final(first_server.first(client.first()))
    replayed = ScramServer(mechanism, lambda user: credential)
    replayed.first(client.first())
    with pytest.raises(ScramError):
        replayed.final(final)


def test_librdkafka_before_2_6_1_nonce_is_accepted_as_kafka_does():
    """Old librdkafka (kcat on Debian) sends its nonce once more in front of the server-first nonce;
    Kafka checks that the client-final nonce ends with the server-first one, and so does this server."""
    server = ScramServer("SCRAM-SHA-256", lambda user: rfc_credential(), nonce=RFC_SERVER_NONCE)
    server_first = server.first(RFC_CLIENT_FIRST)
    salted = salted_password("SCRAM-SHA-256", "pencil", RFC_SALT, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    stored_key = hashlib.sha256(client_key).digest()
    without_proof = b"c=biws,r=rOprNGfwEbeRWgbNEkqO" + server_first[2:server_first.index(b",")]
    auth_message = RFC_CLIENT_FIRST[3:] + b"," + server_first + b"," + without_proof
    proof = bytes(a ^ b for a, b in zip(client_key, hmac.new(stored_key, auth_message, "sha256").digest(),
                                        strict=True))
    assert server.final(without_proof + b",p=" + base64.b64encode(proof)).startswith(b"v=")
    assert server.user == "user"


def test_scram_names_and_iterations():
    assert decode_name("a=2Cb=3Dc") == "a,b=c"
    with pytest.raises(ScramError):
        decode_name("a=b")
    with pytest.raises(ScramError, match="iterations"):
        make_credential("SCRAM-SHA-256", "pw", iterations=1000)
    with pytest.raises(ScramError, match="channel binding"):
        parse_client_first(b"p=tls-unique,,n=user,r=abc")
    client = ScramClient("SCRAM-SHA-256", "user", "pw", nonce="abc")
    with pytest.raises(ScramError, match="iterations"):
        client.final(b"r=abcdef,s=" + base64.b64encode(b"salt") + b",i=1024")


def session() -> SaslSession:
    return SaslSession(SETTINGS)


def authenticate_plain(s: SaslSession, user: str, password: str, now_ms: int = 0):
    return s.authenticate(f"\0{user}\0{password}".encode(), now_ms)


def test_plain_session_authenticates_and_serves_only_sasl_before():
    s = session()
    assert s.admits(3, 0) is not None and s.admits(18, 0) is None
    assert s.handshake("PLAIN").error == ErrorCode.NONE
    step = authenticate_plain(s, "alice", "alice-secret")
    assert step.error == ErrorCode.NONE and not step.close
    assert s.principal == KafkaPrincipal("User", "alice") and s.admits(3, 0) is None


@pytest.mark.parametrize(("user", "password"), [("alice", "nope"), ("mallory", "alice-secret"), ("", "")])
def test_plain_refusals_are_sasl_authentication_failed_then_close(user, password):
    s = session()
    s.handshake("PLAIN")
    step = authenticate_plain(s, user, password)
    assert step.error == ErrorCode.SASL_AUTHENTICATION_FAILED and step.close
    assert not s.authenticated


def test_session_errors_are_kafkas():
    s = session()
    assert s.handshake("GSSAPI").error == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert session().authenticate(b"x", 0).error == ErrorCode.ILLEGAL_SASL_STATE
    s = session()
    s.handshake("PLAIN")
    assert s.handshake("PLAIN").error == ErrorCode.ILLEGAL_SASL_STATE


def test_scram_session_through_the_client():
    s = session()
    assert s.handshake("SCRAM-SHA-512").error == ErrorCode.NONE
    client = ScramClient("SCRAM-SHA-512", "bob", "bob-secret")
    first = s.authenticate(client.first(), 0)
    assert first.error == ErrorCode.NONE and not s.authenticated
    final = s.authenticate(client.final(first.auth_bytes), 0)
    client.verify(final.auth_bytes)
    assert s.principal == KafkaPrincipal("User", "bob")


def test_reauthentication_kip_368():
    settings_ = SaslSettings.of({**PROPS, "connections.max.reauth.ms": "1000"}, "SASL_SSL", lambda: CREDENTIALS)
    s = SaslSession(settings_)
    s.handshake("PLAIN")
    assert authenticate_plain(s, "alice", "alice-secret", now_ms=0).session_lifetime_ms == 1000
    assert s.admits(3, 999) is None
    assert "expired" in s.admits(3, 1000)
    # re-authenticating renews the session; the principal and the mechanism must stay the same
    assert s.handshake("PLAIN").error == ErrorCode.NONE
    assert "re-authentication" in s.admits(3, 1500)
    assert authenticate_plain(s, "alice", "alice-secret", now_ms=1500).error == ErrorCode.NONE
    assert s.admits(3, 2400) is None
    assert s.handshake("SCRAM-SHA-512").error == ErrorCode.ILLEGAL_SASL_STATE
    other = SaslSession(settings_)
    other.handshake("PLAIN")
    authenticate_plain(other, "alice", "alice-secret")
    other.handshake("PLAIN")
    step = authenticate_plain(other, "bob", "bob-secret")
    assert step.error == ErrorCode.SASL_AUTHENTICATION_FAILED and step.close



def test_reauthentication_lifetime_may_be_set_per_listener():
    """Kafka's `listener.name.<l>.connections.max.reauth.ms` wins over the node-wide key for that listener."""
    props = {**PROPS, "connections.max.reauth.ms": "1000", "listener.name.sasl_ssl.connections.max.reauth.ms": "250"}
    assert SaslSettings.of(props, "SASL_SSL").reauth_ms == 250
    assert SaslSettings.of({**PROPS, "connections.max.reauth.ms": "1000"}, "SASL_SSL").reauth_ms == 1000
    with pytest.raises(ConfigError, match="listener.name.sasl_ssl.connections.max.reauth.ms must be 0 or more"):
        SaslSettings.of({**props, "listener.name.sasl_ssl.connections.max.reauth.ms": "soon"}, "SASL_SSL")


def test_settings_errors_name_the_key():
    with pytest.raises(ConfigError, match="no mechanism is enabled"):
        SaslSettings.of({}, "SASL_SSL")
    with pytest.raises(ConfigError, match="listener.name.sasl_ssl.plain.sasl.jaas.config"):
        SaslSettings.of({"sasl.enabled.mechanisms": "PLAIN"}, "SASL_SSL")
    with pytest.raises(ConfigError, match="GSSAPI not supported"):
        SaslSettings.of({**PROPS, "sasl.enabled.mechanisms": "GSSAPI"}, "SASL_SSL")
    with pytest.raises(ConfigError, match="plain.sasl.jaas.config"):
        SaslSettings.of({"listener.name.x.plain.sasl.jaas.config": "not jaas"}, "X")


def test_jaas_parsing():
    jaas = JaasConfig.parse('a.b.C required username="ad\\"min" password=pw user_x="1" user_y="a b";', "k")
    assert jaas.module == "a.b.C" and jaas.login() == ('ad"min', "pw") and jaas.users() == {"x": "1", "y": "a b"}


# -- fuzzing ------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["handshake", "authenticate"]),
                          st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", ""]),
                          st.binary(max_size=200)), max_size=6))
def test_garbage_never_crashes_or_authenticates(steps):
    s = session()
    for kind, mechanism, token in steps:
        step = s.handshake(mechanism) if kind == "handshake" else s.authenticate(token, 0)
        assert isinstance(step.error, ErrorCode)
        if step.close:
            break
    assert not s.authenticated


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.binary(max_size=300))
def test_scram_garbage_after_a_real_first_message_never_authenticates(first_garbage, final_garbage):
    credential = make_credential("SCRAM-SHA-256", "pw")
    for first in (first_garbage, b"n,,n=alice,r=" + first_garbage):
        server = ScramServer("SCRAM-SHA-256", lambda user: credential)
        with contextlib.suppress(ScramError):
            server.first(first)
            server.final(final_garbage)
        assert server.user is None


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=120))
def test_scram_parsers_raise_only_scram_errors(text):
    for parse in (parse_client_first, parse_client_final):
        with contextlib.suppress(ScramError):
            parse(text.encode())


def scram_login(settings_: SaslSettings, user: str, password: str, now_ms: int = 0, session: SaslSession | None = None):
    """A whole SCRAM-SHA-512 login on `session` (a new one by default): the final step."""
    s = session or SaslSession(settings_)
    assert s.handshake("SCRAM-SHA-512").error == ErrorCode.NONE
    client = ScramClient("SCRAM-SHA-512", user, password)
    first = s.authenticate(client.first(), now_ms)
    if first.error:
        return first
    return s.authenticate(client.final(first.auth_bytes), now_ms)


def test_scram_users_are_the_images_at_each_login_and_reauthentication():
    """A user whose password changed or who was deleted in the metadata is refused at the next login,
    and at the next KIP-368 re-authentication of a connection that logged in before."""
    image = {("carol", "SCRAM-SHA-512"): make_credential("SCRAM-SHA-512", "old")}
    settings_ = SaslSettings.of({**PROPS, "connections.max.reauth.ms": "1000"}, "SASL_SSL", lambda: image)
    assert scram_login(settings_, "carol", "old").error == ErrorCode.NONE
    session = SaslSession(settings_)
    assert scram_login(settings_, "carol", "old", session=session).error == ErrorCode.NONE
    image = {("carol", "SCRAM-SHA-512"): make_credential("SCRAM-SHA-512", "new")}
    assert scram_login(settings_, "carol", "old").error == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert scram_login(settings_, "carol", "new").error == ErrorCode.NONE
    reauth = scram_login(settings_, "carol", "old", now_ms=900, session=session)
    assert reauth.error == ErrorCode.SASL_AUTHENTICATION_FAILED and reauth.close
    image = {}
    assert scram_login(settings_, "carol", "new").error == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_jaas_user_options_are_not_scram_users():
    """Kafka's ScramLoginModule has no users: SCRAM users live in the metadata log only."""
    key = "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"
    with pytest.raises(ConfigError, match=f"{key}: user_ options are not SCRAM users"):
        SaslSettings.of({key: 'x.ScramLoginModule required user_alice="pw";'}, "SASL_SSL")
    without = SaslSettings.of({key: 'x.ScramLoginModule required username="admin" password="pw";'}, "SASL_SSL")
    assert scram_login(without, "admin", "pw").error == ErrorCode.SASL_AUTHENTICATION_FAILED
