"""A client's side of TLS and SASL, sans-IO: what to secure a connection with (from the client's own
settings, in librdkafka's or kafka-python's names) and the SASL login as a sequence of requests.

Shared by the node's asyncio connections (`quorum.net.client_security`), the tools, and the SDK's
blocking connections (`client_epochs.connection`), which pass the user's consumer settings here so
that their own connections (metadata, offsets, log bounds) are secured as the user's client is.
`sasl_steps` yields each request (api, version, body) and takes its answer back; the caller does
the I/O; it returns the session lifetime the broker gave (KIP-368: re-authenticate before it ends).

OAUTHBEARER takes its token as the user's client does (`BearerTokens`): confluent-kafka's `oauth_cb`
(called with `sasl.oauthbearer.config`, returning (token, expiry in seconds since the epoch[,
principal, extensions])), librdkafka's unsecured tokens (`enable.sasl.oauthbearer.unsecure.jwt=true`
with `sasl.oauthbearer.config=principal=... scope=...`), or kafka-python's `sasl_oauth_token_provider`
(`token()`, optional `extensions()`). A token is reused until 80% of its life has passed, as
librdkafka refreshes it. What the SDK cannot do (GSSAPI, AWS_MSK_IAM, `sasl.oauthbearer.method=oidc`)
is refused when the settings are read, in one line naming the setting.

It lives in the wire layer (it imports only `quorum.wire`) because `client_epochs` may import nothing
else of `quorum` (DESIGN.md's arrows; tests/test_import_direction.py checks them).
"""

from __future__ import annotations

import inspect
import math
import ssl
import threading
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from quorum.wire.errors import ErrorCode
from quorum.wire.oauthbearer import CONTROL_A, MECHANISM, ClientFirst, OAuthBearerError, UnsecuredConfig
from quorum.wire.protocol import APIS, Api
from quorum.wire.scram import MECHANISMS, ScramClient, ScramError

PLAIN = "PLAIN"
OAUTHBEARER = MECHANISM
SUPPORTED = (PLAIN, *MECHANISMS, OAUTHBEARER)
SASL_HANDSHAKE = APIS[17]
SASL_AUTHENTICATE = APIS[36]


class SaslLoginError(ConnectionError):
    """The server refused this client's SASL login (wrong password, mechanism not enabled, ...)."""


@dataclass(frozen=True, slots=True)
class BearerToken:
    """One OAUTHBEARER token: its compact serialization, when it expires (seconds since the epoch, None
    if unknown), the principal the client believes it names (for messages) and the SASL extensions."""

    value: str
    expires_at_s: float | None = None
    principal: str = ""
    extensions: Mapping[str, str] = field(default_factory=dict)


class BearerTokens:
    """Where a login's OAUTHBEARER tokens come from: `fetch()` makes or asks for a new one; `token()`
    gives the current one, fetched again once 80% of its life has passed (librdkafka's refresh point)."""

    def __init__(self, fetch: Callable[[], BearerToken], describe: str, clock: Callable[[], float] = time.time) -> None:
        self._fetch = fetch
        self.describe = describe
        self._clock = clock
        self._lock = threading.Lock()
        self._current: tuple[BearerToken, float] | None = None

    def token(self) -> BearerToken:
        with self._lock:
            now = self._clock()
            if self._current is not None:
                current, fetched = self._current
                expires = current.expires_at_s
                if expires is None or now < fetched + 0.8 * (expires - fetched):
                    return current
            try:
                token = self._fetch()
            except SaslLoginError:
                raise
            except Exception as exc:  # the user's callback or provider: say which and why, no traceback
                raise SaslLoginError(f"OAUTHBEARER token from {self.describe} failed: {exc!r}") from None
            if token.expires_at_s is not None and token.expires_at_s <= now:
                raise SaslLoginError(f"OAUTHBEARER token from {self.describe} already expired "
                                     f"({token.expires_at_s:.3f} <= now {now:.3f})")
            self._current = (token, now)
            return token

    @classmethod
    def of_oauth_cb(cls, callback: Any, config: Any, clock: Callable[[], float] = time.time) -> BearerTokens:
        """confluent-kafka's `oauth_cb(sasl.oauthbearer.config)` -> (token, expiry[, principal, extensions])."""
        if not callable(callback):
            raise ValueError(f"oauth_cb must be callable, got {type(callback).__name__}")

        def fetch() -> BearerToken:
            answer = callback(config)
            if not isinstance(answer, tuple | list) or not 2 <= len(answer) <= 4:
                raise SaslLoginError("oauth_cb must return (token, expiry seconds since the epoch[, principal, "
                                     f"extensions]), got {type(answer).__name__}")
            value, expiry, *rest = answer
            principal = str(rest[0]) if rest and rest[0] is not None else ""
            extensions = dict(rest[1]) if len(rest) > 1 and rest[1] else {}
            if (not isinstance(value, str) or isinstance(expiry, bool) or not isinstance(expiry, int | float)
                    or not math.isfinite(expiry)):
                raise SaslLoginError("oauth_cb must return a str token and a finite numeric expiry, got "
                                     f"({type(value).__name__}, {expiry!r})")
            return BearerToken(value, float(expiry), principal, extensions)

        return cls(fetch, "oauth_cb", clock)

    @classmethod
    def unsecured(cls, config: UnsecuredConfig, clock: Callable[[], float] = time.time) -> BearerTokens:
        """librdkafka's unsecured JWS from `sasl.oauthbearer.config`."""

        def fetch() -> BearerToken:
            now = clock()
            return BearerToken(config.token(now), now + config.life_s, config.principal, config.extensions)

        return cls(fetch, "sasl.oauthbearer.config (unsecured JWS)", clock)

    @classmethod
    def of_provider(cls, provider: Any) -> BearerTokens:
        """kafka-python's `sasl_oauth_token_provider`: `token()` at each login (the provider caches and
        refreshes, as kafka-python asks of it), `extensions()` if it has them."""
        if not callable(getattr(provider, "token", None)):
            raise ValueError("sasl_oauth_token_provider must have a token() method (kafka-python's "
                             "AbstractTokenProvider)")
        if inspect.iscoroutinefunction(provider.token):
            raise ValueError("sasl_oauth_token_provider.token() is a coroutine (aiokafka's): client_epochs' own "
                             "connections are blocking and need a token() that returns the token")

        def fetch() -> BearerToken:
            value = provider.token()
            extensions = provider.extensions() if callable(getattr(provider, "extensions", None)) else {}
            if not isinstance(value, str):
                raise SaslLoginError(f"sasl_oauth_token_provider.token() returned {type(value).__name__}, not str")
            return BearerToken(value, None, "", dict(extensions or {}))

        return cls(fetch, "sasl_oauth_token_provider")


@dataclass(frozen=True, slots=True)
class SaslLogin:
    mechanism: str
    user: str
    password: str
    tokens: BearerTokens | None = field(default=None, compare=False)
    """OAUTHBEARER's token source (None for the other mechanisms)."""


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How to secure one outgoing connection: a TLS context, a SASL login, both or neither."""

    ssl_context: ssl.SSLContext | None = None
    sasl: SaslLogin | None = None

    @property
    def secured(self) -> bool:
        return self.ssl_context is not None or self.sasl is not None

    @classmethod
    def of_client_properties(cls, props: Mapping[str, Any]) -> ClientSecurity:
        """From librdkafka's settings (confluent-kafka, kcat): `security.protocol`, `ssl.ca.location`,
        `ssl.certificate.location`, `ssl.key.location`, `ssl.key.password`,
        `ssl.endpoint.identification.algorithm`, `sasl.mechanism` (or `sasl.mechanisms`),
        `sasl.username`, `sasl.password`."""
        protocol = _protocol(props.get("security.protocol"), "security.protocol")
        context = None
        if protocol in ("SSL", "SASL_SSL"):
            context = _context(props.get("ssl.ca.location"), props.get("ssl.certificate.location"),
                               props.get("ssl.key.location"), props.get("ssl.key.password"),
                               str(props.get("ssl.endpoint.identification.algorithm", "https")).lower() == "https")
        return cls(context, sasl_login_of_client_properties(props))

    @classmethod
    def of_kafka_python(cls, configs: Mapping[str, Any]) -> ClientSecurity:
        """From kafka-python's settings: `security_protocol`, `ssl_context`, `ssl_cafile`, `ssl_certfile`,
        `ssl_keyfile`, `ssl_password`, `ssl_check_hostname`, `sasl_mechanism`, `sasl_plain_username`,
        `sasl_plain_password`, `sasl_oauth_token_provider`."""
        protocol = _protocol(configs.get("security_protocol"), "security_protocol")
        context = None
        if protocol in ("SSL", "SASL_SSL"):
            context = configs.get("ssl_context") or _context(
                configs.get("ssl_cafile"), configs.get("ssl_certfile"), configs.get("ssl_keyfile"),
                configs.get("ssl_password"), bool(configs.get("ssl_check_hostname", True)))
        sasl = None
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            mechanism = str(configs.get("sasl_mechanism") or PLAIN).strip().upper()
            if mechanism == OAUTHBEARER:
                provider = configs.get("sasl_oauth_token_provider")
                if provider is None:
                    raise ValueError("sasl_mechanism=OAUTHBEARER needs sasl_oauth_token_provider (an object with "
                                     "token() and optionally extensions())")
                sasl = SaslLogin(OAUTHBEARER, "", "", BearerTokens.of_provider(provider))
            else:
                sasl = _login(mechanism, configs.get("sasl_plain_username"), configs.get("sasl_plain_password"),
                              "sasl_mechanism")
        return cls(context, sasl)


def sasl_login_of_client_properties(props: Mapping[str, Any]) -> SaslLogin | None:
    """The SASL login librdkafka's settings ask for (None without SASL); ValueError, one line naming the
    setting, for what the SDK's own connections cannot do. Reads no file: a cheap check of the settings."""
    if _protocol(props.get("security.protocol"), "security.protocol") not in ("SASL_PLAINTEXT", "SASL_SSL"):
        return None
    mechanism = str(props.get("sasl.mechanism", props.get("sasl.mechanisms", "GSSAPI"))).strip().upper()
    if mechanism == OAUTHBEARER:
        return SaslLogin(OAUTHBEARER, "", "", _librdkafka_tokens(props))
    return _login(mechanism, props.get("sasl.username"), props.get("sasl.password"), "sasl.mechanism")


def _protocol(value: Any, key: str) -> str:
    protocol = str(value or "PLAINTEXT").upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise ValueError(f"{key} must be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, got {value!r}")
    return protocol


def _context(ca: Any, certificate: Any, key: Any, password: Any, check_hostname: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca or None)
    if certificate:
        context.load_cert_chain(certificate, key or None, password or None)
    if not check_hostname:
        context.check_hostname = False
    return context


def _login(mechanism: str, user: Any, password: Any, key: str) -> SaslLogin:
    mechanism = mechanism.strip().upper()
    if mechanism != PLAIN and mechanism not in MECHANISMS:
        raise ValueError(f"{key}={mechanism} is not supported by client_epochs' own connections (supported: "
                         f"{', '.join(SUPPORTED)})")
    return SaslLogin(mechanism, str(user or ""), str(password or ""))


def _librdkafka_tokens(props: Mapping[str, Any]) -> BearerTokens:
    """OAUTHBEARER's tokens as librdkafka takes them: `oauth_cb`, else its unsecured JWS."""
    method = str(props.get("sasl.oauthbearer.method", "default")).strip().lower()
    if method == "oidc":
        raise ValueError("sasl.oauthbearer.method=oidc is not supported by client_epochs' own connections: "
                         "give an oauth_cb that returns the token instead")
    if props.get("oauth_cb") is not None:
        return BearerTokens.of_oauth_cb(props["oauth_cb"], props.get("sasl.oauthbearer.config"))
    if str(props.get("enable.sasl.oauthbearer.unsecure.jwt", "false")).strip().lower() not in ("true", "1"):
        raise ValueError("sasl.mechanism=OAUTHBEARER needs an oauth_cb, or enable.sasl.oauthbearer.unsecure.jwt=true "
                         "with sasl.oauthbearer.config=principal=<name> [scope=<a,b>]")
    try:
        return BearerTokens.unsecured(UnsecuredConfig.parse(str(props.get("sasl.oauthbearer.config") or "")))
    except OAuthBearerError as exc:
        raise ValueError(str(exc)) from None


SaslSteps = Generator[tuple[Api, int, Any], Any, int]


def sasl_steps(login: SaslLogin) -> SaslSteps:
    """SaslHandshake v1, then SaslAuthenticate v1 for each token of the mechanism: yields each request
    as (api, version, body) and is sent its answer; returns the session lifetime in ms the broker
    gave (0: none); SaslLoginError when the server refuses."""
    handshake = yield SASL_HANDSHAKE, 1, SASL_HANDSHAKE.request(mechanism=login.mechanism)
    if handshake.error_code:
        raise SaslLoginError(f"SaslHandshake {login.mechanism}: {ErrorCode(handshake.error_code).name} "
                             f"(enabled: {', '.join(handshake.mechanisms or [])})")

    def refused(answer: Any) -> SaslLoginError:
        return SaslLoginError(f"SaslAuthenticate as {login.user} ({login.mechanism}): "
                              f"{ErrorCode(answer.error_code).name}: {answer.error_message}")

    def authenticate(token: bytes) -> tuple[Api, int, Any]:
        return SASL_AUTHENTICATE, 1, SASL_AUTHENTICATE.request(auth_bytes=token)

    if login.mechanism == PLAIN:
        answer = yield authenticate(b"\0" + login.user.encode() + b"\0" + login.password.encode())
        if answer.error_code:
            raise refused(answer)
        return int(answer.session_lifetime_ms or 0)
    if login.mechanism == OAUTHBEARER:
        return (yield from _oauthbearer_steps(login, authenticate))
    client = ScramClient(login.mechanism, login.user, login.password)
    first = yield authenticate(client.first())
    if first.error_code:
        raise refused(first)
    try:
        final_message = client.final(bytes(first.auth_bytes or b""))
    except ScramError as exc:
        raise SaslLoginError(f"SCRAM login as {login.user}: {exc}") from None
    final = yield authenticate(final_message)
    if final.error_code:
        raise refused(final)
    try:
        client.verify(bytes(final.auth_bytes or b""))
    except ScramError as exc:
        raise SaslLoginError(f"SCRAM login as {login.user}: {exc}") from None
    return int(final.session_lifetime_ms or 0)


def _oauthbearer_steps(login: SaslLogin, authenticate: Callable[[bytes], tuple[Api, int, Any]]) -> SaslSteps:
    """RFC 7628 as Kafka's client runs it: the client-first message; an empty answer is success, anything
    else is the server's error JSON, answered with \x01, after which the server refuses."""
    if login.tokens is None:
        raise SaslLoginError("OAUTHBEARER login without a token source")
    token = login.tokens.token()
    try:
        message = ClientFirst(token.value, "", token.extensions).to_bytes()
    except OAuthBearerError as exc:
        raise SaslLoginError(f"OAUTHBEARER token from {login.tokens.describe}: {exc}") from None
    who = f" (principal {token.principal})" if token.principal else ""
    answer = yield authenticate(message)
    if answer.error_code:
        raise SaslLoginError(f"SaslAuthenticate OAUTHBEARER{who}: {ErrorCode(answer.error_code).name}: "
                             f"{answer.error_message}")
    challenge = bytes(answer.auth_bytes or b"")
    if not challenge:
        return int(answer.session_lifetime_ms or 0)
    final = yield authenticate(CONTROL_A)
    server_error = challenge.decode("utf-8", "replace")
    if final.error_code:
        raise SaslLoginError(f"SaslAuthenticate OAUTHBEARER{who}: {ErrorCode(final.error_code).name}: "
                             f"{final.error_message or server_error}")
    raise SaslLoginError(f"SaslAuthenticate OAUTHBEARER{who}: the server answered {server_error} and then accepted")
