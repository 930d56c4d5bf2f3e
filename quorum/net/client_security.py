"""The security of the node's own connections (Raft, broker to controller, replica fetchers) and the
tools': TLS with the node's keystore and truststore, and a SASL login (PLAIN or SCRAM) done right
after connecting, before any other request.

A node speaks to the controllers with the protocol of its first controller listener name and to
other brokers with that of `inter.broker.listener.name`, as Kafka does, with the `ssl.*` settings of
that listener (`listener.name.<name>.ssl.*` first) and, for SASL, the mechanism Kafka's
`sasl.mechanism.controller.protocol` / `sasl.mechanism.inter.broker.protocol` names (default PLAIN
here; Kafka's is GSSAPI, which this project does not have) with the `username`/`password` of that
listener's JAAS config.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from quorum.security.sasl import PLAIN, SaslSettings
from quorum.security.scram import MECHANISMS, ScramClient, ScramError
from quorum.security.tls import SslSettings
from quorum.server.config import ConfigError, NodeConfig
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS

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

    @classmethod
    def of_client_properties(cls, props: dict[str, str]) -> ClientSecurity:
        """From librdkafka-style client settings (`security.protocol`, `ssl.ca.location`,
        `ssl.certificate.location`, `ssl.key.location`, `sasl.mechanism`, `sasl.username`, `sasl.password`):
        what the tools and tests use to reach a secured node."""
        protocol = props.get("security.protocol", "PLAINTEXT").upper()
        context = None
        if protocol in ("SSL", "SASL_SSL"):
            context = ssl.create_default_context(cafile=props.get("ssl.ca.location"))
            if props.get("ssl.certificate.location"):
                context.load_cert_chain(props["ssl.certificate.location"], props.get("ssl.key.location"))
            if props.get("ssl.endpoint.identification.algorithm", "https").lower() != "https":
                context.check_hostname = False
        sasl = None
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            sasl = SaslLogin(props.get("sasl.mechanism", PLAIN).upper(), props.get("sasl.username", ""),
                             props.get("sasl.password", ""))
        return cls(context, sasl)


def node_client_security(config: NodeConfig, listener: str, mechanism_key: str) -> ClientSecurity:
    """What this node uses to reach listener `listener` of its peers (`mechanism_key`: Kafka's
    sasl.mechanism.controller.protocol or sasl.mechanism.inter.broker.protocol)."""
    protocol = config.security_protocols.get(listener, "PLAINTEXT")
    context = SslSettings.of(config.extra, listener).client_context() if protocol in ("SSL", "SASL_SSL") else None
    sasl = None
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        mechanism = config.extra.get(mechanism_key, PLAIN).strip().upper()
        login = SaslSettings.of(config.extra, listener).logins.get(mechanism)
        if login is None:
            raise ConfigError(f"listener {listener} is {protocol}: this node logs in with {mechanism} "
                              f"({mechanism_key}) and needs username and password in "
                              f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config")
        sasl = SaslLogin(mechanism, *login)
    return ClientSecurity(context, sasl)


Exchange = Callable[[Any, int, Any], Awaitable[Any]]
"""Send one request (api, version, body) on the connection and wait for its response body."""


async def sasl_login(exchange: Exchange, login: SaslLogin) -> None:
    """SaslHandshake v1 then SaslAuthenticate (v1) steps for `login`; SaslLoginError when refused."""
    handshake = await exchange(SASL_HANDSHAKE, 1, SASL_HANDSHAKE.request(mechanism=login.mechanism))
    if handshake.error_code:
        raise SaslLoginError(f"SaslHandshake {login.mechanism}: {ErrorCode(handshake.error_code).name} "
                             f"(enabled: {', '.join(handshake.mechanisms or [])})")

    async def step(token: bytes) -> bytes:
        answer = await exchange(SASL_AUTHENTICATE, 1, SASL_AUTHENTICATE.request(auth_bytes=token))
        if answer.error_code:
            raise SaslLoginError(f"SaslAuthenticate as {login.user} ({login.mechanism}): "
                                 f"{ErrorCode(answer.error_code).name}: {answer.error_message}")
        return bytes(answer.auth_bytes or b"")

    if login.mechanism == PLAIN:
        await step(b"\0" + login.user.encode() + b"\0" + login.password.encode())
        return
    if login.mechanism not in MECHANISMS:
        raise SaslLoginError(f"SASL mechanism {login.mechanism} is not supported (PLAIN, {', '.join(MECHANISMS)})")
    client = ScramClient(login.mechanism, login.user, login.password)
    try:
        client.verify(await step(client.final(await step(client.first()))))
    except ScramError as exc:
        raise SaslLoginError(f"SCRAM login as {login.user}: {exc}") from None
