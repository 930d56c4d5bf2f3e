"""SASL on a listener as Kafka runs it: the settings, the mechanisms (PLAIN, SCRAM-SHA-256/512,
OAUTHBEARER with Kafka's unsecured validator, `quorum.security.oauthbearer`) and one
connection's authentication state, sans-IO (the listener feeds it SaslHandshake and SaslAuthenticate
requests and writes what it answers).

Settings, Kafka's names (each may be set for one listener as `listener.name.<name>.<key>`, the
mechanism's own in lower case, `listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config`):
  * `sasl.enabled.mechanisms`: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER; by default every
    mechanism that has a JAAS config on the listener.
  * `listener.name.<l>.plain.sasl.jaas.config`: Kafka's PlainLoginModule, whose `user_<name>="<password>"`
    options are the users (`username`/`password` are what the node itself logs in with).
  * `listener.name.<l>.scram-sha-512.sasl.jaas.config` (or -256): Kafka's ScramLoginModule; its
    `username`/`password` are the node's own login. SCRAM users live in the metadata log, as in
    Kafka's KRaft mode (UserScramCredentialRecords, set by AlterUserScramCredentials or bootstrapped by
    `quorum storage format --add-scram`): the node passes its image's credentials as `credentials`,
    read at every authentication, so a user deleted or given a new password is refused at its next
    login or KIP-368 re-authentication. `user_` options of a SCRAM JAAS config are not users (Kafka's
    ScramLoginModule has none); they are refused, so that nobody believes they still count.
  * `listener.name.<l>.oauthbearer.sasl.jaas.config`: Kafka's OAuthBearerLoginModule; its
    `unsecuredValidator*` options configure the unsecured JWS validator (`quorum.security.oauthbearer`).
  * `connections.max.reauth.ms` (KIP-368; default 0, off; per listener too, as Kafka allows): a session's
    lifetime, sent in every SaslAuthenticate v1+ answer; a connection that sends anything but a
    re-authentication past it is closed. An OAUTHBEARER session ends at its token's `exp` at the latest
    (Kafka's min(connections.max.reauth.ms, exp - now)), whether or not the setting is on.

Before a connection has authenticated, only ApiVersions, SaslHandshake and SaslAuthenticate are
served; anything else closes it, as Kafka does. A failed authentication is answered with
SASL_AUTHENTICATION_FAILED, then the connection is closed.
"""

from __future__ import annotations

import hmac
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from quorum.security.oauthbearer import MODULE as OAUTHBEARER_MODULE
from quorum.security.oauthbearer import OAuthBearerServer, UnsecuredValidator
from quorum.security.principal import KafkaPrincipal
from quorum.security.scram import MECHANISMS, ScramCredential, ScramError, ScramServer
from quorum.security.tls import listener_setting
from quorum.server.config import ConfigError
from quorum.wire.errors import ErrorCode

PLAIN = "PLAIN"
OAUTHBEARER = "OAUTHBEARER"
SUPPORTED = (PLAIN, *MECHANISMS, OAUTHBEARER)
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
UNAUTHENTICATED_APIS = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})

_JAAS = re.compile(r'^\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)'
                   r'\s*(?P<options>.*?)\s*;\s*$', re.DOTALL)
_OPTION = re.compile(r'\s*(?P<key>[^\s=]+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s";]+))')


class SaslFailure(Exception):
    """Authentication failed; the text is for the log. The client gets Kafka's generic message, or
    `client_message` where Kafka tells it more (a SaslAuthenticationException: OAUTHBEARER's error JSON)."""

    def __init__(self, log: str, client_message: str | None = None) -> None:
        super().__init__(log)
        self.client_message = client_message


@dataclass(frozen=True, slots=True)
class JaasConfig:
    """One `sasl.jaas.config` entry: the login module and its options."""

    module: str
    options: Mapping[str, str]

    @classmethod
    def parse(cls, text: str, key: str) -> JaasConfig:
        match = _JAAS.match(text)
        if match is None:
            raise ConfigError(f"{key}: expected '<LoginModule class> required key=\"value\" ...;', got {text!r}")
        options: dict[str, str] = {}
        rest = match["options"]
        while rest.strip():
            option = _OPTION.match(rest)
            if option is None:
                raise ConfigError(f"{key}: cannot read the options at {rest.strip()[:40]!r} (key=\"value\" ...)")
            value = option["quoted"] if option["quoted"] is not None else option["bare"]
            options[option["key"]] = re.sub(r"\\(.)", r"\1", value)
            rest = rest[option.end():]
        return cls(match["module"], options)

    def users(self) -> dict[str, str]:
        """`user_<name>="<password>"` options: name -> password."""
        return {k.removeprefix("user_"): v for k, v in self.options.items() if k.startswith("user_") and k != "user_"}

    def login(self) -> tuple[str, str] | None:
        """`username`/`password`: what the node itself logs in with on this listener, if set."""
        if "username" in self.options and "password" in self.options:
            return self.options["username"], self.options["password"]
        return None


ScramLookup = Callable[[str, str], ScramCredential | None]
"""(mechanism, user) -> that user's credential for the mechanism, or None."""
ScramCredentials = Callable[[], Mapping[tuple[str, str], ScramCredential]]
"""The SCRAM credentials by (user, mechanism) as of now (`MetadataImage.scram` of the node's latest image)."""


def _lookup(credentials: ScramCredentials | None) -> ScramLookup:
    if credentials is None:
        return lambda mechanism, user: None
    return lambda mechanism, user: credentials().get((user, mechanism))


@dataclass
class SaslSettings:
    """One SASL listener's mechanisms and users."""

    listener: str
    mechanisms: tuple[str, ...]
    plain_users: dict[str, str] = field(default_factory=dict)
    scram_lookup: ScramLookup = lambda mechanism, user: None
    reauth_ms: int = 0
    logins: dict[str, tuple[str, str]] = field(default_factory=dict)
    """mechanism -> (user, password) the node itself uses on this listener (its JAAS username/password)."""
    oauthbearer: UnsecuredValidator = field(default_factory=UnsecuredValidator)
    """OAUTHBEARER's token validator (the JAAS config's unsecuredValidator* options)."""
    wall_ms: Callable[[], int] = lambda: int(time.time() * 1000)
    """Now, in ms since the epoch: what token times (`exp`, `iat`) are compared with."""

    @classmethod
    def of(cls, props: Mapping[str, str], listener: str, credentials: ScramCredentials | None = None) -> SaslSettings:
        """`credentials()`: the SCRAM credentials by (user, mechanism) at the moment of asking (the node's image)."""
        jaas: dict[str, JaasConfig] = {}
        for mechanism in SUPPORTED:
            key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
            if key in props:
                jaas[mechanism] = JaasConfig.parse(props[key], key)
                if mechanism in MECHANISMS and jaas[mechanism].users():
                    raise ConfigError(f"{key}: user_ options are not SCRAM users (SCRAM users live in the metadata "
                                      f"log: `quorum storage format --add-scram` or AlterUserScramCredentials)")
        enabled_key, enabled = listener_setting(props, listener, "sasl.enabled.mechanisms")
        if enabled is not None:
            mechanisms = tuple(m.strip().upper() for m in enabled.split(",") if m.strip())
            unknown = [m for m in mechanisms if m not in SUPPORTED]
            if unknown:
                raise ConfigError(f"{enabled_key}: {', '.join(unknown)} not supported (supported: "
                                  f"{', '.join(SUPPORTED)})")
        else:
            mechanisms = tuple(jaas)
        if not mechanisms:
            raise ConfigError(f"listener {listener} is SASL but no mechanism is enabled: set "
                              f"listener.name.{listener.lower()}.<mechanism>.sasl.jaas.config "
                              f"(mechanism plain, scram-sha-256, scram-sha-512 or oauthbearer)")
        if OAUTHBEARER in jaas and jaas[OAUTHBEARER].module != OAUTHBEARER_MODULE:
            key = f"listener.name.{listener.lower()}.oauthbearer.sasl.jaas.config"
            raise ConfigError(f"{key}: the login module must be {OAUTHBEARER_MODULE}, got {jaas[OAUTHBEARER].module}")
        if OAUTHBEARER in mechanisms and OAUTHBEARER not in jaas:  # Kafka: no JAAS entry, no start
            raise ConfigError(f"OAUTHBEARER is enabled on listener {listener} but "
                              f"listener.name.{listener.lower()}.oauthbearer.sasl.jaas.config (its validator's "
                              f"options) is not set")
        if PLAIN in mechanisms and PLAIN not in jaas:
            raise ConfigError(f"PLAIN is enabled on listener {listener} but "
                              f"listener.name.{listener.lower()}.plain.sasl.jaas.config (its users) is not set")
        reauth_key, reauth = listener_setting(props, listener, "connections.max.reauth.ms")
        reauth = reauth or "0"
        if not reauth.strip().isdigit():
            raise ConfigError(f"{reauth_key} must be 0 or more, got {reauth!r}")
        oauth_key = f"listener.name.{listener.lower()}.oauthbearer.sasl.jaas.config"
        validator = (UnsecuredValidator.of_options(jaas[OAUTHBEARER].options, oauth_key) if OAUTHBEARER in jaas
                     else UnsecuredValidator())
        logins = {m: login for m, config in jaas.items() if m != OAUTHBEARER and (login := config.login()) is not None}
        return cls(listener, mechanisms, jaas[PLAIN].users() if PLAIN in jaas else {},
                   _lookup(credentials), int(reauth), logins, validator)


class PlainServer:
    """RFC 4616: one message `[authzid] NUL authcid NUL passwd`; the authzid, if any, must be the user."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.user: str | None = None

    def respond(self, token: bytes) -> tuple[bytes, bool]:
        if self.user is not None:
            raise SaslFailure("PLAIN takes one message")
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise SaslFailure("PLAIN message is not authzid NUL user NUL password")
        try:
            authzid, user, password = (part.decode("utf-8") for part in parts)
        except UnicodeDecodeError:
            raise SaslFailure("PLAIN message is not UTF-8") from None
        if not user:
            raise SaslFailure("PLAIN message has no user name")
        if authzid and authzid != user:
            raise SaslFailure(f"PLAIN authorization id {authzid!r} is not the user {user!r}")
        expected = self._users.get(user)
        # compare in constant time whether the user exists or not
        matched = hmac.compare_digest((expected or "\0" + password).encode(), password.encode())
        if expected is None:
            raise SaslFailure(f"unknown user {user!r}")
        if not matched:
            raise SaslFailure(f"wrong password for user {user!r}")
        self.user = user
        return b"", True


class ScramMechanism:
    """A ScramServer as a two-step SASL mechanism."""

    def __init__(self, mechanism: str, lookup: ScramLookup) -> None:
        self._server = ScramServer(mechanism, lambda user: lookup(mechanism, user))
        self._step = 0
        self.user: str | None = None

    def respond(self, token: bytes) -> tuple[bytes, bool]:
        self._step += 1
        try:
            if self._step == 1:
                return self._server.first(token), False
            if self._step == 2:
                answer = self._server.final(token)
                self.user = self._server.user
                return answer, True
        except ScramError as exc:
            raise SaslFailure(str(exc)) from None
        raise SaslFailure("SCRAM exchange already complete")


@dataclass(frozen=True, slots=True)
class Step:
    """What to answer a SaslHandshake or SaslAuthenticate with, and what follows."""

    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    auth_bytes: bytes = b""
    session_lifetime_ms: int = 0
    close: bool = False
    log: str | None = None
    """Why it failed, for the node's log (the client is told less)."""


class SaslSession:
    """One connection's SASL state: handshake, authenticate (one or more steps), authenticated; again
    for a KIP-368 re-authentication, which must keep the mechanism and the principal."""

    def __init__(self, settings: SaslSettings) -> None:
        self._settings = settings
        self._mechanism_name: str | None = None
        self._mechanism: PlainServer | ScramMechanism | OAuthBearerServer | None = None
        self.principal: KafkaPrincipal | None = None
        self._authenticated_mechanism: str | None = None
        self._expires_ms: int | None = None

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    def admits(self, api_key: int, now_ms: int) -> str | None:
        """Why a request of `api_key` may not be served now (the connection is closed), or None. ApiVersions
        is served before authentication and during a re-authentication, but like any request other than
        SaslHandshake it closes a session past its lifetime (Kafka's SocketServer closes an expired channel
        unless the request is the SaslHandshake that begins a re-authentication)."""
        if api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
            return None
        if not self.authenticated:
            return None if api_key == API_VERSIONS else f"API key {api_key} before SASL authentication"
        if self._mechanism is not None:
            return None if api_key == API_VERSIONS else f"API key {api_key} during SASL re-authentication"
        if self._expires_ms is not None and now_ms >= self._expires_ms:
            why = "its token's expiry or connections.max.reauth.ms" if self._authenticated_mechanism == OAUTHBEARER \
                else "connections.max.reauth.ms"
            return f"the SASL session of {self.principal} expired ({why}) without re-authentication"
        return None

    def handshake(self, mechanism: str) -> Step:
        enabled = self._settings.mechanisms
        if self._mechanism is not None:
            return Step(ErrorCode.ILLEGAL_SASL_STATE, "SaslHandshake during an authentication", close=True,
                        log="a second SaslHandshake before SaslAuthenticate completed")
        if mechanism not in enabled:
            return Step(ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"mechanism {mechanism!r} is not enabled", close=True,
                        log=f"unsupported SASL mechanism {mechanism!r} (enabled: {', '.join(enabled)})")
        if self._authenticated_mechanism not in (None, mechanism):
            return Step(ErrorCode.ILLEGAL_SASL_STATE, "re-authentication must use the same mechanism", close=True,
                        log=f"re-authentication with {mechanism} after {self._authenticated_mechanism}")
        self._mechanism_name = mechanism
        if mechanism == PLAIN:
            self._mechanism = PlainServer(self._settings.plain_users)
        elif mechanism == OAUTHBEARER:
            self._mechanism = OAuthBearerServer(self._settings.oauthbearer, SaslFailure, self._settings.wall_ms)
        else:
            self._mechanism = ScramMechanism(mechanism, self._settings.scram_lookup)
        return Step()

    def authenticate(self, token: bytes, now_ms: int) -> Step:
        mechanism = self._mechanism
        if mechanism is None:
            return Step(ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate without SaslHandshake", close=True,
                        log="SaslAuthenticate without a SaslHandshake first")
        try:
            answer, done = mechanism.respond(token)
        except SaslFailure as exc:
            self._mechanism = None
            during = "re-authentication" if self.principal is not None else "authentication"
            return Step(ErrorCode.SASL_AUTHENTICATION_FAILED,
                        exc.client_message or f"Authentication failed during {during} due to invalid credentials "
                                              f"with SASL mechanism {self._mechanism_name}", close=True, log=str(exc))
        if not done:
            return Step(auth_bytes=answer)
        assert mechanism.user is not None
        principal = KafkaPrincipal("User", mechanism.user)
        self._mechanism = None
        if self.principal is not None and principal != self.principal:
            return Step(ErrorCode.SASL_AUTHENTICATION_FAILED,  # Kafka's ReauthInfo.ensurePrincipalUnchanged text
                        f"Cannot change principals during re-authentication from {self.principal.principal_type}."
                        f"{self.principal.name}: {principal.principal_type}.{principal.name}", close=True,
                        log=f"re-authentication as {principal} on a connection of {self.principal}")
        self.principal = principal
        self._authenticated_mechanism = self._mechanism_name
        lifetime = self._settings.reauth_ms
        credential_expires_ms = getattr(mechanism, "credential_expires_ms", None)
        if credential_expires_ms is not None:  # Kafka: min(connections.max.reauth.ms, credential expiry - now), >= 0
            left = max(0, credential_expires_ms - self._settings.wall_ms())
            lifetime = min(lifetime, left) if lifetime > 0 else left
            self._expires_ms = now_ms + lifetime
        else:
            self._expires_ms = now_ms + lifetime if lifetime > 0 else None
        return Step(auth_bytes=answer, session_lifetime_ms=lifetime)
