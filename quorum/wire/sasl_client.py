"""A client's side of TLS and SASL, sans-IO: what to secure a connection with (from the client's own
settings, in librdkafka's or kafka-python's names) and the SASL login as a sequence of requests.

Shared by the node's asyncio connections (`quorum.net.client_security`), the tools, and the SDK's
blocking connections (`client_epochs.connection`), which pass the user's consumer settings here so
that their own connections (metadata, offsets, log bounds) are secured as the user's client is.
`sasl_steps` yields each request (api, version, body) and takes its answer back; the caller does
the I/O. It lives in the wire layer (it imports only `quorum.wire`) because `client_epochs` may import
nothing else of `quorum` (DESIGN.md's arrows; tests/test_import_direction.py checks them).
"""

from __future__ import annotations

import ssl
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any

from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS, Api
from quorum.wire.scram import MECHANISMS, ScramClient, ScramError

PLAIN = "PLAIN"
SASL_HANDSHAKE = APIS[17]
SASL_AUTHENTICATE = APIS[36]


class SaslLoginError(ConnectionError):
    """The server refused this client's SASL login (wrong password, mechanism not enabled, ...)."""


@dataclass(frozen=True, slots=True)
class SaslLogin:
    mechanism: str
    user: str
    password: str


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
        sasl = None
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            mechanism = props.get("sasl.mechanism", props.get("sasl.mechanisms", "GSSAPI"))
            sasl = _login(str(mechanism), props.get("sasl.username"), props.get("sasl.password"), "sasl.mechanism")
        return cls(context, sasl)

    @classmethod
    def of_kafka_python(cls, configs: Mapping[str, Any]) -> ClientSecurity:
        """From kafka-python's settings: `security_protocol`, `ssl_context`, `ssl_cafile`, `ssl_certfile`,
        `ssl_keyfile`, `ssl_password`, `ssl_check_hostname`, `sasl_mechanism`, `sasl_plain_username`,
        `sasl_plain_password`."""
        protocol = _protocol(configs.get("security_protocol"), "security_protocol")
        context = None
        if protocol in ("SSL", "SASL_SSL"):
            context = configs.get("ssl_context") or _context(
                configs.get("ssl_cafile"), configs.get("ssl_certfile"), configs.get("ssl_keyfile"),
                configs.get("ssl_password"), bool(configs.get("ssl_check_hostname", True)))
        sasl = None
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            sasl = _login(str(configs.get("sasl_mechanism") or PLAIN), configs.get("sasl_plain_username"),
                          configs.get("sasl_plain_password"), "sasl_mechanism")
        return cls(context, sasl)


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
        raise ValueError(f"{key} {mechanism!r} is not supported here (PLAIN, {', '.join(MECHANISMS)})")
    return SaslLogin(mechanism, str(user or ""), str(password or ""))


SaslSteps = Generator[tuple[Api, int, Any], Any, None]


def sasl_steps(login: SaslLogin) -> SaslSteps:
    """SaslHandshake v1, then SaslAuthenticate v1 for each token of the mechanism: yields each request
    as (api, version, body) and is sent its answer; SaslLoginError when the server refuses."""
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
        return
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
