"""SASL/OAUTHBEARER sans-IO: the client-first message (RFC 7628 as Kafka reads it), Kafka's unsecured
JWS and its validator's checks and error JSON, the session's lifetime bound to the token's expiry
(KIP-368), the client's side as the SDK runs it (oauth_cb, librdkafka's unsecured tokens, kafka-python's
token provider) and the settings it refuses in one line. Hypothesis: garbage, truncated messages and
tokens give a clean SASL refusal, never a traceback, and never authenticate anyone."""

from __future__ import annotations

import base64
import contextlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.security.oauthbearer import TokenRefused, UnsecuredValidator
from quorum.security.principal import KafkaPrincipal
from quorum.security.sasl import SaslSession, SaslSettings, Step
from quorum.server.config import ConfigError
from quorum.wire.errors import ErrorCode
from quorum.wire.oauthbearer import (
    ClientFirst,
    OAuthBearerError,
    UnsecuredConfig,
    UnsecuredJws,
    parse_client_first,
    unsecured_token,
)
from quorum.wire.sasl_client import BearerTokens, ClientSecurity, SaslLogin, SaslLoginError, sasl_steps

NOW_S = 1_800_000_000.0
NOW_MS = int(NOW_S * 1000)
MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
JAAS_KEY = "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config"


def oauth_settings(options: str = "", reauth_ms: int = 0, now_ms: int = NOW_MS) -> SaslSettings:
    props = {JAAS_KEY: f'{MODULE} required unsecuredLoginStringClaim_sub="admin" {options};',
             "connections.max.reauth.ms": str(reauth_ms)}
    settings_ = SaslSettings.of(props, "SASL_SSL")
    settings_.wall_ms = lambda: now_ms
    return settings_


def token(sub: str | None = "alice", life_s: float = 60, scope: tuple[str, ...] = (), **claims) -> str:
    body = json.loads(base64.urlsafe_b64decode(unsecured_token(sub or "x", NOW_S, life_s, scope).split(".")[1] + "=="))
    if sub is None:
        del body["sub"]
    body.update(claims)
    body = {k: v for k, v in body.items() if v is not ...}
    return jws({"alg": "none"}, body)


def jws(header: object, claims: object, signature: str = "") -> str:
    def part(value: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part(header)}.{part(claims)}.{signature}"


def login(session: SaslSession, message: bytes, now_ms: int = 0) -> list[Step]:
    """Handshake, the client-first message and, after an error challenge, the client's \\x01."""
    steps = [session.handshake("OAUTHBEARER")]
    steps.append(session.authenticate(message, now_ms))
    if steps[-1].error == ErrorCode.NONE and steps[-1].auth_bytes:
        steps.append(session.authenticate(b"\x01", now_ms))
    return steps


def first(value: str, **extensions: str) -> bytes:
    return ClientFirst(value, "", extensions).to_bytes()


# -- the client-first message ----------------------------------------------------------------------


def test_client_first_message_is_kafkas_and_librdkafkas():
    assert ClientFirst("a.b.", "", {"traceId": "x y"}).to_bytes() == b"n,,\x01auth=Bearer a.b.\x01traceId=x y\x01\x01"
    assert ClientFirst("a.b.", "alice").to_bytes() == b"n,a=alice,\x01auth=Bearer a.b.\x01\x01"
    parsed = parse_client_first(b"n,,\x01auth=BEARER tok-en_.1\x01logicalCluster=lkc-1\x01\x01")
    assert parsed == ClientFirst("tok-en_.1", "", {"logicalCluster": "lkc-1"})


@pytest.mark.parametrize(("message", "reason"), [
    (b"", "Invalid OAUTHBEARER client first message"),
    (b"n,,\x01auth=Bearer t\x01", "Invalid OAUTHBEARER client first message"),  # truncated: no final \x01
    (b"y,,\x01auth=Bearer t\x01\x01", "Invalid OAUTHBEARER client first message"),
    (b"n,,\x01other=x\x01\x01", "'auth' not specified"),
    (b"n,,\x01auth=Basic dXNlcg\x01\x01", "Invalid scheme"),
    (b"n,,\x01auth=Bearer a+b/c=\x01\x01", "invalid 'auth' format"),
    (b"n,,\x01auth=Bearer t\x01ext1=x\x01\x01", "Invalid OAUTHBEARER client first message"),  # name: letters only
    (b"n,,\x01auth=Bearer t\x01\x01\xff", "Invalid OAUTHBEARER client first message"),
])
def test_client_first_message_refusals(message, reason):
    with pytest.raises(OAuthBearerError, match=reason):
        parse_client_first(message)


_SASLNAME = st.text(st.characters(min_codepoint=1, max_codepoint=127, blacklist_characters=",="), min_size=1)
_EXT_VALUE = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E) | st.sampled_from(" \t\r\n"), min_size=1)


@settings(max_examples=200, deadline=None)
@given(token_=st.from_regex(r"[-_.a-zA-Z0-9]+", fullmatch=True), authzid=_SASLNAME | st.just(""),
       extensions=st.dictionaries(st.from_regex(r"[A-Za-z]+", fullmatch=True).filter(lambda k: k != "auth"),
                                  _EXT_VALUE, max_size=3))
def test_client_first_message_round_trips(token_, authzid, extensions):
    message = ClientFirst(token_, authzid, extensions)
    assert parse_client_first(message.to_bytes()) == message


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.builds(lambda a, b: b"n,,\x01auth=Bearer " + a + b, st.binary(max_size=40),
                                           st.sampled_from([b"", b"\x01", b"\x01\x01", b".\x01\x01"])))
def test_garbage_client_first_message_is_a_clean_refusal(message):
    with contextlib.suppress(OAuthBearerError):
        parse_client_first(message)
    session = SaslSession(oauth_settings())
    steps = login(session, message)
    assert steps[-1].error in (ErrorCode.NONE, ErrorCode.SASL_AUTHENTICATION_FAILED)
    assert not session.authenticated or message.startswith(b"n,")
    assert session.principal in (None, KafkaPrincipal("User", "alice"))


# -- the unsecured JWS and the validator -----------------------------------------------------------


def refusal(value: str, validator: UnsecuredValidator | None = None, now_ms: int = NOW_MS) -> TokenRefused:
    with pytest.raises(TokenRefused) as refused:
        (validator or UnsecuredValidator()).validate(value, now_ms)
    return refused.value


@pytest.mark.parametrize(("value", "reason"), [
    ("garbage", "3 dot-separated"),
    ("a..b", "contains '..'"),
    ("e30.e30", "3 dot-separated"),  # truncated: the signature's dot is missing
    ("%%%.e30.", "malformed Base64"),
    ("bm90IGpzb24.e30.", "malformed JSON"),
    ("WzFd.e30.", "not an object"),
    (jws({"typ": "JWT"}, {"sub": "a", "exp": NOW_S + 60}), "must have an Algorithm"),
    (jws({"alg": "HS256"}, {"sub": "a", "exp": NOW_S + 60}), "'none' for an algorithm"),
    (jws({"alg": "none"}, {"sub": "a", "exp": NOW_S + 60}, "c2ln"), "must not contain a digital signature"),
    (token(exp=...), "No expiration time"),
    (token(exp="soon"), "'exp' claim was not of type Number"),
    (token(sub=None), "No principal name in JWT claim: sub"),
    (token(sub="  "), "No principal name"),
    (token(sub=7), "'sub' claim was not of type String"),
    (token(life_s=-1), "on or after the Expiration Time"),
    (token(iat=NOW_S + 30), "Issued At value"),
    (token(iat=NOW_S - 10, exp=NOW_S - 20), "on or after the Expiration Time"),
    (jws({"alg": "none"}, {"sub": "a", "exp": NOW_S + 60, "scope": 5}), "'scope' claim was not of type List"),
])
def test_invalid_tokens_are_invalid_token(value, reason):
    refused = refusal(value)
    assert refused.status == "invalid_token" and reason in str(refused)
    assert refused.json() == '{"status":"invalid_token"}'


def test_expiry_issued_at_and_clock_skew_are_kafkas():
    skewed = UnsecuredValidator(clock_skew_ms=5000)
    assert skewed.validate(token(iat=NOW_S + 4, exp=NOW_S + 60), NOW_MS).principal == "alice"
    assert skewed.validate(token(exp=NOW_S - 4, iat=NOW_S - 10), NOW_MS).expires_ms == NOW_MS - 4000
    refusal(token(exp=NOW_S), now_ms=NOW_MS)  # on the expiry: expired
    assert "not after the Issued At" in str(refusal(token(iat=NOW_S - 1, exp=NOW_S - 1), skewed))


def test_required_scope_and_custom_claims():
    validator = UnsecuredValidator.of_options({
        "unsecuredValidatorRequiredScope": "kafka  produce", "unsecuredValidatorPrincipalClaimName": "client_id",
        "unsecuredValidatorScopeClaimName": "scp"}, JAAS_KEY)
    ok = jws({"alg": "none"}, {"client_id": "svc", "exp": NOW_S + 60, "scp": ["kafka", "produce", " x "]})
    assert validator.validate(ok, NOW_MS).principal == "svc"
    short = jws({"alg": "none"}, {"client_id": "svc", "exp": NOW_S + 60, "scp": "kafka"})
    refused = refusal(short, validator)
    assert refused.status == "insufficient_scope" and refused.scope == "[kafka, produce]"
    assert refused.json() == '{"status":"insufficient_scope", "scope":"[kafka, produce]"}'  # Kafka's, byte for byte
    assert refusal(token(), validator).status == "invalid_token"  # no client_id claim


@pytest.mark.parametrize("options", ['unsecuredValidatorAllowableClockSkewMs="-1"',
                                     'unsecuredValidatorAllowableClockSkewMs="soon"', 'unsecuredValidatorScope="x"'])
def test_bad_validator_options_are_refused_at_start(options):
    with pytest.raises(ConfigError, match=JAAS_KEY):
        oauth_settings(options)


def test_the_login_module_must_be_kafkas():
    with pytest.raises(ConfigError, match="OAuthBearerLoginModule"):
        SaslSettings.of({JAAS_KEY: "org.apache.kafka.common.security.plain.PlainLoginModule required;"}, "SASL_SSL")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=120) | st.builds(lambda a, b, c: f"{a}.{b}.{c}", st.text(max_size=30),
                                         st.text(max_size=30), st.text(max_size=5)))
def test_garbage_tokens_are_invalid_token(value):
    try:
        UnsecuredValidator().validate(value, NOW_MS)
    except TokenRefused as refused:
        assert refused.status == "invalid_token"
    with contextlib.suppress(OAuthBearerError):
        UnsecuredJws.parse(value)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["sub", "exp", "iat", "scope", "x"]),
                       st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=5)
                       | st.lists(st.integers() | st.text(max_size=3), max_size=3)
                       | st.dictionaries(st.text(max_size=2), st.integers(), max_size=2)))
def test_any_claims_are_validated_or_refused_cleanly(claims):
    value = jws({"alg": "none"}, claims)
    try:
        valid = UnsecuredValidator(required_scope=("k",)).validate(value, NOW_MS)
    except TokenRefused as refused:
        assert refused.status in ("invalid_token", "insufficient_scope")
    else:
        assert valid.principal == claims["sub"] and "k" in valid.scope


# -- the session: Kafka's answers, the principal, the lifetime --------------------------------------


def test_a_valid_token_authenticates_user_sub_for_at_most_the_tokens_life():
    session = SaslSession(oauth_settings(reauth_ms=0))
    [handshake, done] = login(session, first(token(life_s=30), traceId="t1"))
    assert handshake.error == ErrorCode.NONE and done.error == ErrorCode.NONE and done.auth_bytes == b""
    assert session.principal == KafkaPrincipal("User", "alice")
    assert done.session_lifetime_ms == 30_000  # no connections.max.reauth.ms: the token's expiry
    assert session.admits(3, now_ms=29_999) is None
    assert "expired (its token's expiry" in session.admits(3, now_ms=30_000)
    assert session.admits(18, now_ms=29_999) is None and "expired" in session.admits(18, now_ms=30_000)  # ApiVersions
    assert SaslSession(oauth_settings()).admits(18, now_ms=0) is None  # before authenticating, as ever
    capped = SaslSession(oauth_settings(reauth_ms=10_000))
    assert login(capped, first(token(life_s=30)))[-1].session_lifetime_ms == 10_000
    shorter = SaslSession(oauth_settings(reauth_ms=60_000))
    assert login(shorter, first(token(life_s=30)))[-1].session_lifetime_ms == 30_000


def test_a_refused_token_is_a_json_challenge_then_sasl_authentication_failed():
    """Kafka: the error JSON as a challenge (no error code), the client's \\x01, then
    SASL_AUTHENTICATION_FAILED with the JSON as the message, and the connection closed."""
    session = SaslSession(oauth_settings('unsecuredValidatorRequiredScope="kafka"'))
    handshake, challenge, final = login(session, first(token(scope=("other",))))
    assert challenge.error == ErrorCode.NONE and not challenge.close
    assert challenge.auth_bytes == b'{"status":"insufficient_scope", "scope":"[kafka]"}'
    assert final.error == ErrorCode.SASL_AUTHENTICATION_FAILED and final.close
    assert final.message == '{"status":"insufficient_scope", "scope":"[kafka]"}'
    assert "missing a required scope (kafka)" in final.log and not session.authenticated
    expired = SaslSession(oauth_settings())
    assert login(expired, first(token(life_s=-5)))[-1].message == '{"status":"invalid_token"}'


def test_an_unparsable_message_gets_kafkas_generic_refusal():
    session = SaslSession(oauth_settings())
    _, refused = login(session, b"n,,\x01auth=Bearer \x01\x01")
    assert refused.error == ErrorCode.SASL_AUTHENTICATION_FAILED and refused.close
    assert refused.message == ("Authentication failed during authentication due to invalid credentials with SASL "
                               "mechanism OAUTHBEARER")


def test_authzid_must_be_the_tokens_principal():
    session = SaslSession(oauth_settings())
    _, refused = login(session, ClientFirst(token(), "bob").to_bytes())
    assert refused.error == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert refused.message == ("Authentication failed: Client requested an authorization id (bob) that is different "
                               "from the token's principal name (alice)")
    assert login(SaslSession(oauth_settings()), ClientFirst(token(), "alice").to_bytes())[-1].error == 0


def test_reauthentication_with_a_new_token_keeps_the_principal():
    session = SaslSession(oauth_settings())
    login(session, first(token(life_s=5)))
    renewed = login(session, first(token(life_s=50)), now_ms=4000)
    assert renewed[-1].error == ErrorCode.NONE and renewed[-1].session_lifetime_ms == 50_000
    assert session.admits(3, now_ms=40_000) is None
    stolen = login(session, first(token("mallory")), now_ms=5000)
    assert stolen[-1].error == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert stolen[-1].message == "Cannot change principals during re-authentication from User.alice: User.mallory"


def test_oauthbearer_is_enabled_only_with_its_jaas_config():
    plain_only = {"listener.name.sasl_ssl.plain.sasl.jaas.config":
                  'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="b";'}
    session = SaslSession(SaslSettings.of(plain_only, "SASL_SSL"))
    assert session.handshake("OAUTHBEARER").error == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    both = SaslSettings.of({**plain_only, JAAS_KEY: f"{MODULE} required;"}, "SASL_SSL")
    assert both.mechanisms == ("PLAIN", "OAUTHBEARER")
    with pytest.raises(ConfigError, match=f"OAUTHBEARER is enabled on listener SASL_SSL but {JAAS_KEY}"):
        SaslSettings.of({**plain_only, "sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER"}, "SASL_SSL")


# -- the client's side ---------------------------------------------------------------------------------


def run(login_: SaslLogin, session: SaslSession, now_ms: int = 0) -> int:
    """sasl_steps against a broker's session, in process: the session lifetime it returns."""
    steps, answer = sasl_steps(login_), None
    try:
        while True:
            api, _, body = steps.send(answer)
            step = (session.handshake(body.mechanism) if api.key == 17
                    else session.authenticate(bytes(body.auth_bytes), now_ms))
            fields = {"mechanisms": ["OAUTHBEARER"]} if api.key == 17 else {
                "error_message": step.message, "auth_bytes": step.auth_bytes,
                "session_lifetime_ms": step.session_lifetime_ms}
            answer = api.response(error_code=int(step.error), **fields)
    except StopIteration as done:
        return done.value


def test_the_client_logs_in_with_confluent_kafkas_oauth_cb():
    asked: list = []

    def oauth_cb(config):
        asked.append(config)
        return token(life_s=40), NOW_S + 40, "alice", {"traceId": "abc"}

    security = ClientSecurity.of_client_properties({"security.protocol": "SASL_PLAINTEXT",
                                                    "sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb,
                                                    "sasl.oauthbearer.config": "anything"})
    security.sasl.tokens._clock = lambda: NOW_S
    session = SaslSession(oauth_settings())
    assert run(security.sasl, session) == 40_000 and session.principal == KafkaPrincipal("User", "alice")
    run(security.sasl, SaslSession(oauth_settings()))
    assert asked == ["anything"]  # the token is reused until 80% of its life has passed
    security.sasl.tokens._clock = lambda: NOW_S + 33
    run(security.sasl, SaslSession(oauth_settings(now_ms=NOW_MS + 33_000)))
    assert len(asked) == 2


def test_the_client_makes_librdkafkas_unsecured_tokens():
    security = ClientSecurity.of_client_properties({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "oauthbearer", "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": "principal=alice scope=kafka,produce lifeSeconds=90 extension_traceId=x"})
    value = security.sasl.tokens.token().value
    claims = json.loads(base64.urlsafe_b64decode(value.split(".")[1] + "=="))
    assert value.startswith("eyJhbGciOiJub25lIn0.") and value.endswith(".")  # librdkafka's {"alg":"none"}
    assert claims["sub"] == "alice" and claims["scope"] == ["kafka", "produce"]
    assert round(claims["exp"] - claims["iat"]) == 90
    session = SaslSession(oauth_settings('unsecuredValidatorRequiredScope="kafka"', now_ms=int(claims["iat"] * 1000)))
    assert run(security.sasl, session) == 90_000


def test_the_client_logs_in_with_kafka_pythons_token_provider():
    class Provider:
        def token(self):
            return token(life_s=20)

        def extensions(self):
            return {"traceId": "k"}

    security = ClientSecurity.of_kafka_python({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER",
                                               "sasl_oauth_token_provider": Provider()})
    assert run(security.sasl, SaslSession(oauth_settings())) == 20_000


def test_a_refused_token_is_a_login_error_naming_kafkas_json():
    login_ = SaslLogin("OAUTHBEARER", "", "", BearerTokens(lambda: BearerToken_(token(scope=("x",))), "test"))
    with pytest.raises(SaslLoginError, match=r'SASL_AUTHENTICATION_FAILED: \{"status":"insufficient_scope", '
                                             r'"scope":"\[kafka\]"\}'):
        run(login_, SaslSession(oauth_settings('unsecuredValidatorRequiredScope="kafka"')))


def BearerToken_(value: str):  # noqa: N802 - a token without expiry, as kafka-python's provider gives
    from quorum.wire.sasl_client import BearerToken

    return BearerToken(value)


@pytest.mark.parametrize("answer", [None, "token-only", ("t",), (1, 2), ("t", "soon"), ("t", NOW_S - 1),
                                    ("t", float("nan")), ("t", True)])
def test_a_bad_oauth_cb_answer_is_a_login_error(answer):
    tokens = BearerTokens.of_oauth_cb(lambda config: answer, None, clock=lambda: NOW_S)
    with pytest.raises(SaslLoginError, match="oauth_cb"):
        tokens.token()


def test_a_failing_oauth_cb_is_a_login_error_without_a_traceback():
    def broken(config):
        raise RuntimeError("identity provider down")

    with pytest.raises(SaslLoginError, match="OAUTHBEARER token from oauth_cb failed: RuntimeError"):
        BearerTokens.of_oauth_cb(broken, None).token()


@pytest.mark.parametrize(("props", "named"), [
    ({"sasl.mechanism": "GSSAPI"}, "sasl.mechanism=GSSAPI is not supported"),
    ({"sasl.mechanism": "AWS_MSK_IAM"}, "sasl.mechanism=AWS_MSK_IAM is not supported"),
    ({"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc"}, "sasl.oauthbearer.method=oidc is not"),
    ({"sasl.mechanism": "OAUTHBEARER"}, "needs an oauth_cb, or enable.sasl.oauthbearer.unsecure.jwt=true"),
    ({"sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": "true"}, "no principal"),
    ({"sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": "true",
      "sasl.oauthbearer.config": "principal=a lifeSeconds=0"}, "lifeSeconds must be a positive integer"),
    ({"sasl.mechanism": "OAUTHBEARER", "oauth_cb": "not callable"}, "oauth_cb must be callable"),
])
def test_settings_the_sdk_cannot_use_are_refused_in_one_line(props, named):
    with pytest.raises(ValueError, match=named) as refused:
        ClientSecurity.of_client_properties({"security.protocol": "SASL_SSL", **props})
    assert "\n" not in str(refused.value)


class _AsyncProvider:
    """aiokafka's token provider shape: `async def token()`."""

    async def token(self) -> str:
        return "t"


@pytest.mark.parametrize(("configs", "named"), [
    ({"sasl_mechanism": "OAUTHBEARER"}, "sasl_mechanism=OAUTHBEARER needs sasl_oauth_token_provider"),
    ({"sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": object()}, "must have a token"),
    ({"sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": _AsyncProvider()}, "is a coroutine"),
    ({"sasl_mechanism": "GSSAPI"}, "sasl_mechanism=GSSAPI is not supported"),
    ({"sasl_mechanism": "AWS_MSK_IAM"}, "sasl_mechanism=AWS_MSK_IAM is not supported"),
])
def test_kafka_python_settings_the_sdk_cannot_use_are_refused_in_one_line(configs, named):
    with pytest.raises(ValueError, match=named):
        ClientSecurity.of_kafka_python({"security_protocol": "SASL_PLAINTEXT", **configs})


@pytest.mark.parametrize("text", ["", "scope=a", "principal=a bogus=1", "principal=a lifeSeconds=x",
                                  'principal=a"b', "principal=a extension_auth=x", "principal=a extension_k1=x",
                                  "principal"])
def test_unsecured_config_refusals(text):
    with pytest.raises(OAuthBearerError, match="sasl.oauthbearer.config"):
        UnsecuredConfig.parse(text)


@pytest.mark.parametrize("refused", [{"sasl.mechanism": "GSSAPI"}, {"sasl.mechanism": "AWS_MSK_IAM"},
                                     {"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
                                      "sasl.oauthbearer.token.endpoint.url": "http://127.0.0.1:1/token"}])
def test_wrappers_replicator_and_spark_source_refuse_at_construction_naming_the_setting(refused):
    """Nothing is polled: the refusal comes from the constructor (or the Spark options' parse), one line."""
    from client_epochs.confluent import Consumer
    from client_epochs.kafka_python import KafkaConsumer
    from client_epochs.mirror import MirrorOptions, Replicator
    from client_epochs.spark.planning import SourceOptionError, parse_options

    settings_ = {"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SASL_PLAINTEXT", **refused}
    named = next(f"{key}={value}" for key, value in refused.items() if value in ("GSSAPI", "AWS_MSK_IAM", "oidc"))
    with pytest.raises(ValueError, match=named):
        Consumer({**settings_, "group.id": "g"})
    if refused["sasl.mechanism"] != "OAUTHBEARER":
        with pytest.raises(ValueError, match=f"sasl_mechanism={refused['sasl.mechanism']}"):
            KafkaConsumer(bootstrap_servers="127.0.0.1:1", security_protocol="SASL_PLAINTEXT",
                          sasl_mechanism=refused["sasl.mechanism"])
    consumer_config = {k: v for k, v in settings_.items() if k != "bootstrap.servers"}
    with pytest.raises(ValueError, match=named):
        Replicator("127.0.0.1:1", "127.0.0.1:2", ["t"], MirrorOptions(consumer_config=consumer_config))
    with pytest.raises(SourceOptionError, match=f"option kafka.{named}"):
        parse_options({"subscribe": "t", **{f"kafka.{k}": v for k, v in settings_.items()}})


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80) | st.lists(st.sampled_from(["principal=a", "scope=", "scope=x,,y", "lifeSeconds=9",
                                                         "lifeSeconds=-1", "extension_k=v", "extension_=v",
                                                         "principalClaimName=c", "x", "=", 'principal="q"']),
                                        max_size=5).map(" ".join))
def test_garbage_sasl_oauthbearer_config_is_a_clean_refusal(text):
    try:
        config = UnsecuredConfig.parse(text)
    except OAuthBearerError as exc:
        assert "sasl.oauthbearer.config" in str(exc)
    else:
        assert UnsecuredValidator(config.principal_claim, config.scope_claim).validate(
            config.token(NOW_S), NOW_MS).principal == config.principal


@settings(max_examples=100, deadline=None)
@given(st.none() | st.integers() | st.text(max_size=5) | st.tuples(st.text(max_size=5) | st.integers(),
                                                                    st.floats() | st.text(max_size=3) | st.none())
       | st.lists(st.text(max_size=3), max_size=5))
def test_any_oauth_cb_answer_is_a_token_or_a_login_error(answer):
    tokens = BearerTokens.of_oauth_cb(lambda config: answer, None, clock=lambda: NOW_S)
    try:
        token_ = tokens.token()
    except SaslLoginError:
        return
    assert isinstance(token_.value, str) and token_.expires_at_s > NOW_S
