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

from collections.abc import Awaitable, Callable
from typing import Any

from quorum.security.sasl import SaslSettings
from quorum.security.tls import SslSettings
from quorum.server.config import ConfigError, NodeConfig
from quorum.wire.sasl_client import PLAIN, ClientSecurity, SaslLogin, SaslLoginError, sasl_steps
from quorum.wire.scram import MECHANISMS

__all__ = ["ClientSecurity", "SaslLogin", "SaslLoginError", "node_client_security", "sasl_login"]


def node_client_security(config: NodeConfig, listener: str, mechanism_key: str) -> ClientSecurity:
    """What this node uses to reach listener `listener` of its peers (`mechanism_key`: Kafka's
    sasl.mechanism.controller.protocol or sasl.mechanism.inter.broker.protocol)."""
    protocol = config.security_protocols.get(listener, "PLAINTEXT")
    context = SslSettings.of(config.extra, listener).client_context() if protocol in ("SSL", "SASL_SSL") else None
    sasl = None
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        mechanism = config.extra.get(mechanism_key, PLAIN).strip().upper()
        if mechanism not in (PLAIN, *MECHANISMS):
            raise ConfigError(f"{mechanism_key}={mechanism}: a node logs in to its peers with PLAIN, SCRAM-SHA-256 or "
                              f"SCRAM-SHA-512 (its own connections do not take OAUTHBEARER tokens)")
        login = SaslSettings.of(config.extra, listener).logins.get(mechanism)
        if login is None:
            raise ConfigError(f"listener {listener} is {protocol}: this node logs in with {mechanism} "
                              f"({mechanism_key}) and needs username and password in "
                              f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config")
        sasl = SaslLogin(mechanism, *login)
    return ClientSecurity(context, sasl)


Exchange = Callable[[Any, int, Any], Awaitable[Any]]
"""Send one request (api, version, body) on the connection and wait for its response body."""


async def sasl_login(exchange: Exchange, login: SaslLogin) -> int:
    """Run `login` (`quorum.wire.sasl_client.sasl_steps`) over `exchange`: the session lifetime in ms the
    broker gave (0: none); SaslLoginError when refused."""
    steps = sasl_steps(login)
    answer = None
    try:
        while True:
            answer = await exchange(*steps.send(answer))
    except StopIteration as done:
        return int(done.value or 0)
