"""A listener's security: TLS on accepted connections, SASL before requests are served, and the
request context (`quorum.security.principal`) every handler of the connection reads.

The listener calls `ListenerSecurity.accept()` once per connection (the TLS handshake, when the
listener is SSL or SASL_SSL, happens there, so a failed one is logged and closes that connection
only), then `screen()` for each request: SaslHandshake and SaslAuthenticate are answered here from
the connection's `quorum.security.sasl.SaslSession`, and a request that may not be served yet closes
the connection (`AuthenticationError`, a WireError: the listener logs it as bad input).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from dataclasses import dataclass

from quorum.net.dispatch import Dispatcher, Reply
from quorum.security.principal import ANONYMOUS, KafkaPrincipal, RequestContext, request_context, set_request_context
from quorum.security.sasl import (
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SaslSession,
    SaslSettings,
    ScramCredentials,
    Step,
)
from quorum.security.tls import PrincipalRule, SslSettings, certificate_principal
from quorum.wire.errors import ErrorCode, WireError
from quorum.wire.protocol import Request

log = logging.getLogger(__name__)

TLS_HANDSHAKE_TIMEOUT_S = 60.0


class AuthenticationError(WireError):
    """The connection failed TLS or SASL authentication or sent a request it may not yet send."""


@dataclass(frozen=True, slots=True)
class Screened:
    """An answer the security layer gives instead of the handlers; `close` after writing it."""

    reply: Reply
    close: str | None = None


class ConnectionSecurity:
    """One accepted connection: who it is and, on a SASL listener, its SASL session."""

    def __init__(self, listener: ListenerSecurity, context: RequestContext, sasl: SaslSession | None) -> None:
        self._listener = listener
        self.context = context
        self._sasl = sasl

    def screen(self, request: Request) -> Screened | None:
        """None: serve `request` as usual. Else the answer to write (and whether to close after it)."""
        sasl = self._sasl
        key = request.api.key
        if sasl is None:
            return None
        now_ms = int(time.monotonic() * 1000)
        if key == SASL_HANDSHAKE:
            return self._answer(request, sasl.handshake(request.body.mechanism),
                                mechanisms=list(self._listener.sasl.mechanisms))  # type: ignore[union-attr]
        if key == SASL_AUTHENTICATE:
            step = sasl.authenticate(bytes(request.body.auth_bytes or b""), now_ms)
            if step.error == 0 and sasl.principal is not None and self.context.principal != sasl.principal:
                self.context = RequestContext(sasl.principal, self.context.listener_name,
                                              self.context.security_protocol, self.context.client_host)
                set_request_context(self.context)
            return self._answer(request, step)
        refused = sasl.admits(key, now_ms)
        if refused is not None:
            raise AuthenticationError(f"{self._listener.name}: {refused}")
        return None

    def _answer(self, request: Request, step: Step, **fields: object) -> Screened:
        api = request.api
        if api.key == SASL_AUTHENTICATE:
            fields.update(error_message=step.message, auth_bytes=step.auth_bytes)
            if request.version >= 1:
                fields["session_lifetime_ms"] = step.session_lifetime_ms
        close = None
        if step.close:
            close = f"{self._listener.name}: SASL {api.name} refused ({step.error.name}): {step.log}"
            log.warning("closing connection from %s after %s", self.context.client_host, close)
        return Screened(Reply(api.response(error_code=int(step.error), **fields), request.version), close)


class ListenerSecurity:
    """How one listener secures its connections (see the module docstring)."""

    def __init__(self, name: str, protocol: str, ssl_context: ssl.SSLContext | None = None,
                 sasl: SaslSettings | None = None,
                 principal_rules: tuple[PrincipalRule, ...] = (PrincipalRule(),)) -> None:
        self.name = name
        self.principal_rules = principal_rules
        self.protocol = protocol
        self.ssl_context = ssl_context
        self.sasl = sasl
        self.tls_failures = 0

    @classmethod
    def plaintext(cls, name: str = "") -> ListenerSecurity:
        return cls(name, "PLAINTEXT")

    @classmethod
    def of(cls, props: dict[str, str], name: str, protocol: str,
           scram: ScramCredentials | None = None) -> ListenerSecurity:
        """From a node's properties: the listener's `ssl.*` and SASL settings (ConfigError naming the key);
        `scram()` gives the SCRAM users at each authentication (the node's image's)."""
        settings = SslSettings.of(props, name)
        tls = settings.server_context() if protocol in ("SSL", "SASL_SSL") else None
        sasl = SaslSettings.of(props, name, scram) if protocol in ("SASL_PLAINTEXT", "SASL_SSL") else None
        return cls(name, protocol, tls, sasl, settings.principal_rules)

    async def accept(self, writer: asyncio.StreamWriter) -> ConnectionSecurity:
        """TLS (when the listener has it), then the connection's request context, set for its task."""
        peer = writer.get_extra_info("peername")
        host = str(peer[0]) if peer else ""
        principal: KafkaPrincipal = ANONYMOUS
        if self.ssl_context is not None:
            try:
                await writer.start_tls(self.ssl_context, ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S)
            except (ssl.SSLError, TimeoutError, ConnectionError) as exc:
                self.tls_failures += 1
                raise AuthenticationError(f"{self.name}: TLS handshake failed: {exc}") from None
            if self.sasl is None:
                try:
                    principal = certificate_principal(writer.get_extra_info("peercert"),
                                                      self.principal_rules) or ANONYMOUS
                except ValueError as exc:
                    raise AuthenticationError(f"{self.name}: {exc}") from None
        context = RequestContext(principal, self.name, self.protocol, host)
        set_request_context(context)
        return ConnectionSecurity(self, context, SaslSession(self.sasl) if self.sasl is not None else None)


def register_sasl_outside_authentication(dispatcher: Dispatcher) -> None:
    """SaslHandshake and SaslAuthenticate in the node's ApiVersions (a SASL listener's clients look for
    them there). A SASL listener answers them itself (`ConnectionSecurity.screen`); one that reaches the
    handlers came on a listener without SASL, which Kafka answers ILLEGAL_SASL_STATE."""

    async def illegal(request: Request) -> Reply:
        fields = {"mechanisms": []} if request.api.key == SASL_HANDSHAKE else {
            "error_message": f"SASL is not enabled on listener {request_context().listener_name}"}
        return Reply(request.api.response(error_code=int(ErrorCode.ILLEGAL_SASL_STATE), **fields), request.version)

    dispatcher.register(SASL_HANDSHAKE, illegal)
    dispatcher.register(SASL_AUTHENTICATE, illegal)
