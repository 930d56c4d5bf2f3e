"""SASL/OAUTHBEARER (RFC 7628, KIP-255) on the wire, sans-IO: the client-first message, Kafka's
unsecured JWS (RFC 7515 with `alg` none) and the settings that make one, shared by the broker's side
(`quorum.security.oauthbearer`, which validates tokens) and the clients' (`quorum.wire.sasl_client`,
the SDK's own connections).

The client-first message is a GS2 header and key/value pairs, each ended by \\x01:
`n,[a=<authzid>],\\x01auth=Bearer <token>\\x01[<key>=<value>\\x01...]\\x01`. Kafka's
OAuthBearerClientInitialResponse reads it with one regular expression: keys `[A-Za-z]+`, values
`[\\x21-\\x7E \\t\\r\\n]+`, the token `[-_.a-zA-Z0-9]+`, the scheme `Bearer` in any case, `auth` not an
extension. A server that refuses the token answers its error JSON as a challenge; the client answers
a lone \\x01 and is then refused (SASL_AUTHENTICATION_FAILED carrying the JSON).

An unsecured JWS is `base64url(header).base64url(claims).` with header `{"alg":"none"}` and an empty
signature; librdkafka makes one from `sasl.oauthbearer.config` (`principal=<sub> scope=<a,b>
lifeSeconds=<n> principalClaimName=<name> scopeClaimName=<name> extension_<key>=<value>`), with `iat`
and `exp` in seconds since the epoch (3 decimals) and the scope as a list. Every parse failure is an
`OAuthBearerError` saying what is wrong; nothing here raises anything else on bad input.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MECHANISM = "OAUTHBEARER"
SEPARATOR = "\x01"
CONTROL_A = b"\x01"
"""What a client answers a server's error challenge with, so that the server sends its final refusal."""

_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"  # ASCII without ',' and '=', or =2C / =3D
_KEY = r"[A-Za-z]+"
_VALUE = r"[\x21-\x7E \t\r\n]+"
_CLIENT_FIRST = re.compile(rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<pairs>(?:{_KEY}={_VALUE}\x01)*)\x01",
                           re.DOTALL)
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_.a-zA-Z0-9]+)", re.ASCII)
_EXTENSION_KEY = re.compile(rf"{_KEY}")
_EXTENSION_VALUE = re.compile(rf"{_VALUE}")
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")
AUTH_KEY = "auth"


class OAuthBearerError(ValueError):
    """An OAUTHBEARER message, token or setting that does not parse; the text says what is wrong."""


@dataclass(frozen=True, slots=True)
class ClientFirst:
    """The client's one message: the token, the authorization id (may be empty) and the extensions."""

    token: str
    authzid: str = ""
    extensions: Mapping[str, str] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        check_extensions(self.extensions)
        if not self.token or _AUTH.fullmatch(f"Bearer {self.token}") is None:
            raise OAuthBearerError("the token must be a non-empty compact serialization ([-_.a-zA-Z0-9]+)")
        if self.authzid and re.fullmatch(_SASLNAME, self.authzid) is None:
            raise OAuthBearerError(f"authorization id {self.authzid!r} has ',' or '=' unescaped (=2C, =3D)")
        authzid = f"a={self.authzid}" if self.authzid else ""
        pairs = "".join(f"{SEPARATOR}{key}={value}" for key, value in self.extensions.items())
        return f"n,{authzid},{SEPARATOR}auth=Bearer {self.token}{pairs}{SEPARATOR}{SEPARATOR}".encode()


def check_extensions(extensions: Mapping[str, str]) -> None:
    """RFC 7628 3.1's names and values, and not the reserved `auth` (Kafka's validateExtensions)."""
    for key, value in extensions.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise OAuthBearerError(f"extension {key!r}: names and values must be strings")
        if key == AUTH_KEY or _EXTENSION_KEY.fullmatch(key) is None:
            raise OAuthBearerError(f"extension name {key!r} is invalid (letters only, not 'auth')")
        if _EXTENSION_VALUE.fullmatch(value) is None:
            raise OAuthBearerError(f"extension value {value!r} of {key!r} is invalid (printable ASCII, space, "
                                   f"tab, CR, LF)")


def parse_client_first(data: bytes) -> ClientFirst:
    """The client-first message, as Kafka's OAuthBearerClientInitialResponse reads it."""
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message: not UTF-8") from None
    match = _CLIENT_FIRST.fullmatch(text)
    if match is None:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message")
    pairs: dict[str, str] = {}
    for pair in match["pairs"].split(SEPARATOR)[:-1]:
        key, _, value = pair.partition("=")
        pairs[key] = value
    auth = pairs.pop(AUTH_KEY, None)
    if auth is None:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message: 'auth' not specified")
    check_extensions(pairs)
    bearer = _AUTH.fullmatch(auth)
    if bearer is None:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message: invalid 'auth' format")
    if bearer["scheme"].lower() != "bearer":
        raise OAuthBearerError(f"Invalid scheme in OAUTHBEARER client first message: {bearer['scheme']}")
    return ClientFirst(bearer["token"], match["authzid"] or "", pairs)


# -- unsecured JWS ------------------------------------------------------------------------------------


def _b64url_decode(part: str, what: str) -> bytes:
    if _BASE64URL.fullmatch(part) is None or len(part) % 4 == 1:
        raise OAuthBearerError(f"malformed Base64 URL encoded value ({what})")
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise OAuthBearerError(f"malformed Base64 URL encoded value ({what})") from None


def _b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _java_value(value: Any) -> Any:
    """A JSON member as Kafka's OAuthBearerUnsecuredJws keeps it (Jackson): numbers stay numbers, arrays
    become lists of text, anything else its text (true -> "true", null -> "null", an object -> "")."""
    if isinstance(value, list):
        return [_java_text(item) for item in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    return _java_text(value)


def _java_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float | str):
        return str(value)
    return ""


def _json_object(part: str, what: str) -> dict[str, Any]:
    raw = _b64url_decode(part, what)
    try:
        parsed = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise OAuthBearerError(f"malformed JSON ({what})") from None
    if not isinstance(parsed, dict):
        raise OAuthBearerError(f"malformed JSON ({what} is not an object)")
    return {str(key): _java_value(value) for key, value in parsed.items()}


@dataclass(frozen=True, slots=True)
class UnsecuredJws:
    """A parsed unsecured JWS: its header and claims, as Kafka's OAuthBearerUnsecuredJws reads them."""

    value: str
    header: Mapping[str, Any]
    claims: Mapping[str, Any]

    @classmethod
    def parse(cls, token: str) -> UnsecuredJws:
        """Three dot-separated Base64URL parts, JSON objects, `alg` none and no signature."""
        if ".." in token:
            raise OAuthBearerError("Malformed compact serialization contains '..'")
        parts = token.split(".")
        if len(parts) != 3:
            raise OAuthBearerError("Unsecured JWS compact serializations must have 3 dot-separated "
                                   "Base64URL-encoded values")
        header = _json_object(parts[0], "header")
        claims = _json_object(parts[1], "claims")
        if "alg" not in header:
            raise OAuthBearerError("JWS header must have an Algorithm value")
        if header["alg"] != "none":
            raise OAuthBearerError("Unsecured JWS must have 'none' for an algorithm")
        if parts[2]:
            raise OAuthBearerError("Unsecured JWS must not contain a digital signature")
        return cls(token, header, claims)

    def number(self, name: str) -> float | None:
        """A NumericDate-like claim (`exp`, `iat`): None when absent; OAuthBearerError when not a number."""
        value = self.claims.get(name)
        if value is None:
            return None
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise OAuthBearerError(f"The '{name}' claim was not of type Number: {type(value).__name__}")
        return float(value)

    def scope(self, claim: str = "scope") -> frozenset[str]:
        """The scope claim: one string (the whole, trimmed, as one element) or a list of strings."""
        value = self.claims.get(claim)
        if value is None:
            return frozenset()
        if isinstance(value, str):
            return frozenset({value.strip()}) if value.strip() else frozenset()
        if isinstance(value, list):
            return frozenset(item.strip() for item in value if item.strip())
        raise OAuthBearerError(f"The '{claim}' claim was not of type List: {type(value).__name__}")


def unsecured_token(principal: str, issued_at_s: float, life_s: float, scope: tuple[str, ...] = (),
                    principal_claim: str = "sub", scope_claim: str = "scope") -> str:
    """An unsecured JWS as librdkafka makes it from `sasl.oauthbearer.config` (`iat` and `exp` with 3
    decimals, the scope as a list when there is one)."""
    issued_ms = int(issued_at_s * 1000)  # truncated to the ms as librdkafka does: never after the server's now
    claims: dict[str, Any] = {principal_claim: principal, "iat": issued_ms / 1000,
                              "exp": (issued_ms + round(life_s * 1000)) / 1000}
    if scope:
        claims[scope_claim] = list(dict.fromkeys(scope))
    header = _b64url_encode(json.dumps({"alg": "none"}, separators=(",", ":")).encode())
    return f"{header}.{_b64url_encode(json.dumps(claims, separators=(',', ':')).encode())}."


@dataclass(frozen=True, slots=True)
class UnsecuredConfig:
    """librdkafka's `sasl.oauthbearer.config` for its unsecured tokens (and its defaults)."""

    principal: str
    scope: tuple[str, ...] = ()
    life_s: int = 3600
    principal_claim: str = "sub"
    scope_claim: str = "scope"
    extensions: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str, key: str = "sasl.oauthbearer.config") -> UnsecuredConfig:
        """`principal=<name> [scope=<a,b>] [lifeSeconds=<n>] [principalClaimName=<c>] [scopeClaimName=<c>]
        [extension_<name>=<value>]...` separated by spaces, as librdkafka reads it."""
        values: dict[str, str] = {}
        extensions: dict[str, str] = {}
        for item in str(text or "").split():
            name, sep, value = item.partition("=")
            if not sep:
                raise OAuthBearerError(f"{key}: unrecognized {item!r} (name=value)")
            if name.startswith("extension_"):
                extensions[name.removeprefix("extension_")] = value
            elif name in ("principal", "scope", "lifeSeconds", "principalClaimName", "scopeClaimName"):
                if not value:
                    raise OAuthBearerError(f"{key}: empty '{name}'")
                values[name] = value
            else:
                raise OAuthBearerError(f"{key}: unrecognized {item!r} (principal, scope, lifeSeconds, "
                                       f"principalClaimName, scopeClaimName, extension_<name>)")
        if "principal" not in values:
            raise OAuthBearerError(f"{key}: no principal=<value>")
        life = values.get("lifeSeconds", "3600")
        if not life.isdigit() or not 0 < int(life) <= 2**31 - 1:
            raise OAuthBearerError(f"{key}: lifeSeconds must be a positive integer, got {life!r}")
        for name, value in values.items():
            if '"' in value:
                raise OAuthBearerError(f"{key}: {name} cannot contain a '\"' character")
        try:
            check_extensions(extensions)
        except OAuthBearerError as exc:
            raise OAuthBearerError(f"{key}: {exc}") from None
        scope = tuple(dict.fromkeys(part for part in values.get("scope", "").split(",") if part))
        return cls(values["principal"], scope, int(life), values.get("principalClaimName", "sub"),
                   values.get("scopeClaimName", "scope"), extensions)

    def token(self, now_s: float) -> str:
        return unsecured_token(self.principal, now_s, self.life_s, self.scope, self.principal_claim,
                               self.scope_claim)
