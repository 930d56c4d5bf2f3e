"""SASL/OAUTHBEARER on a broker with Kafka's unsecured JWS validator (OAuthBearerUnsecuredValidator-
CallbackHandler, Kafka's default when no server callback handler is configured), sans-IO.

The listener's `listener.name.<l>.oauthbearer.sasl.jaas.config` is Kafka's
`org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ...;`, whose validator
options are Kafka's:
  * `unsecuredValidatorPrincipalClaimName` (default `sub`): the string claim naming the principal;
  * `unsecuredValidatorScopeClaimName` (default `scope`): the string or string-list claim of the scope;
  * `unsecuredValidatorRequiredScope`: space-separated scope values every token must hold;
  * `unsecuredValidatorAllowableClockSkewMs` (default 0).
`unsecuredLoginStringClaim_sub` (and Kafka's other `unsecuredLogin*` options) are the node's own login.

The checks, in Kafka's order: the token parses as an unsecured JWS (three Base64URL parts, `alg` none,
no signature) with a numeric `exp` and a non-blank principal claim; the principal claim is a string;
`iat`, if present, is not after now plus the skew; now minus the skew is before `exp`; `exp` is after
`iat`; the scope holds every required value. A token that fails is answered, as Kafka does, with the
error JSON as a challenge (`{"status":"invalid_token"}`, or `{"status":"insufficient_scope",
"scope":"[a, b]"}` naming the required scope as Java prints a list); the client answers \\x01 and gets
SASL_AUTHENTICATION_FAILED with that JSON as the message. A message that does not parse is refused
at once with Kafka's generic message. The session ends at the token's `exp` at the latest
(`credential_expires_ms`: KIP-368's session lifetime is min(connections.max.reauth.ms, exp - now)).

Like Kafka's, this validator trusts what the token says: anyone can claim any principal. It is for
development and tests, never for a cluster that needs authentication.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from quorum.server.config import ConfigError
from quorum.wire.oauthbearer import CONTROL_A, OAuthBearerError, UnsecuredJws, parse_client_first

MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_OPTION = "unsecuredValidator"
_KNOWN = {f"{_OPTION}{name}" for name in ("PrincipalClaimName", "ScopeClaimName", "RequiredScope",
                                          "AllowableClockSkewMs")}


class TokenRefused(Exception):
    """The token failed validation: Kafka's error status, the scope for insufficient_scope, and why (log)."""

    def __init__(self, status: str, reason: str, scope: str | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.scope = scope

    def json(self) -> str:
        """Kafka's OAuthBearerSaslServer.jsonErrorResponse, byte for byte."""
        text = f'{{"status":"{self.status}"'
        if self.scope is not None:
            text += f', "scope":"{self.scope}"'
        return text + "}"


@dataclass(frozen=True, slots=True)
class Validated:
    principal: str
    expires_ms: int
    scope: frozenset[str]


@dataclass(frozen=True, slots=True)
class UnsecuredValidator:
    """Kafka's unsecured validator with its options (see the module docstring)."""

    principal_claim: str = "sub"
    scope_claim: str = "scope"
    required_scope: tuple[str, ...] = ()
    clock_skew_ms: int = 0

    @classmethod
    def of_options(cls, options: Mapping[str, str], key: str) -> UnsecuredValidator:
        """From the JAAS options of `key`; ConfigError names a bad option."""
        unknown = [name for name in options if name.startswith(_OPTION) and name not in _KNOWN]
        if unknown:
            raise ConfigError(f"{key}: unknown option {unknown[0]} (Kafka's: {', '.join(sorted(_KNOWN))})")
        skew = (options.get(f"{_OPTION}AllowableClockSkewMs") or "0").strip() or "0"
        if not skew.isdigit() or int(skew) > 2**31 - 1:
            raise ConfigError(f"{key}: {_OPTION}AllowableClockSkewMs must be a non-negative integer, got {skew!r}")
        return cls((options.get(f"{_OPTION}PrincipalClaimName") or "").strip() or "sub",
                   (options.get(f"{_OPTION}ScopeClaimName") or "").strip() or "scope",
                   tuple((options.get(f"{_OPTION}RequiredScope") or "").split()), int(skew))

    def validate(self, token: str, now_ms: int) -> Validated:
        """The token's principal, expiry (ms since the epoch) and scope; TokenRefused if it fails."""
        try:
            jws = UnsecuredJws.parse(token)
            scope = jws.scope(self.scope_claim)
            exp = jws.number("exp")
            if exp is None:
                raise OAuthBearerError("No expiration time in JWT")
            principal = jws.claims.get(self.principal_claim)
            if principal is not None and not isinstance(principal, str):
                raise OAuthBearerError(f"The '{self.principal_claim}' claim was not of type String")
            if principal is None or not principal.strip():
                raise OAuthBearerError(f"No principal name in JWT claim: {self.principal_claim}")
            iat = jws.number("iat")
        except OAuthBearerError as exc:
            raise TokenRefused("invalid_token", str(exc)) from None
        if iat is not None and 1000 * iat > now_ms + self.clock_skew_ms:
            raise TokenRefused("invalid_token", f"The Issued At value ({iat} seconds) was after the indicated time "
                                                f"({now_ms} ms) plus allowable clock skew ({self.clock_skew_ms} ms)")
        if now_ms - self.clock_skew_ms >= 1000 * exp:
            raise TokenRefused("invalid_token", f"The indicated time ({now_ms} ms) minus allowable clock skew "
                                                f"({self.clock_skew_ms} ms) was on or after the Expiration Time "
                                                f"value ({exp} seconds)")
        if iat is not None and exp <= iat:
            raise TokenRefused("invalid_token", f"The Expiration Time time ({exp} seconds) was not after the "
                                                f"Issued At time ({iat} seconds)")
        for required in self.required_scope:
            if required not in scope:
                listed = "[" + ", ".join(self.required_scope) + "]"
                raise TokenRefused("insufficient_scope", f"The provided scope ({sorted(scope)}) was missing a "
                                                         f"required scope ({required}). All required scope "
                                                         f"elements: {listed}", listed)
        return Validated(principal, round(exp * 1000), scope)


class OAuthBearerServer:
    """One OAUTHBEARER exchange (Kafka's OAuthBearerSaslServer): `respond(message)` answers each
    client message; SaslFailure (from `quorum.security.sasl`, raised through `failure`) refuses."""

    def __init__(self, validator: UnsecuredValidator, failure: type[Exception], wall_ms) -> None:
        """`failure(log, client_message)`: the exception that refuses; `wall_ms()`: now, ms since the epoch."""
        self._validator = validator
        self._failure = failure
        self._wall_ms = wall_ms
        self._error: str | None = None
        self._reason = ""
        self.user: str | None = None
        self.credential_expires_ms: int | None = None
        self.extensions: Mapping[str, str] = {}

    def respond(self, message: bytes) -> tuple[bytes, bool]:
        if self.user is not None:
            raise self._failure("OAUTHBEARER exchange already complete")
        if bytes(message) == CONTROL_A and self._error is not None:
            raise self._failure(f"token refused ({self._reason}): {self._error}", self._error)
        self._error = None
        try:
            first = parse_client_first(bytes(message))
        except OAuthBearerError as exc:
            raise self._failure(str(exc)) from None
        try:
            valid = self._validator.validate(first.token, self._wall_ms())
        except TokenRefused as exc:
            self._error, self._reason = exc.json(), str(exc)
            return self._error.encode(), False
        if first.authzid and first.authzid != valid.principal:
            text = (f"Authentication failed: Client requested an authorization id ({first.authzid}) that is "
                    f"different from the token's principal name ({valid.principal})")
            raise self._failure(text, text)
        self.user, self.credential_expires_ms, self.extensions = valid.principal, valid.expires_ms, first.extensions
        return b"", True
