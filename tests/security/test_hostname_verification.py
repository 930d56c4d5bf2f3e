"""Issue 38: a server certificate for another host is refused at the handshake when
`ssl.endpoint.identification.algorithm=https` (Kafka's default), by the nodes' own connections
(`quorum.security.tls.SslSettings.client_context`: Raft, broker to controller, replica fetchers, the
tools) and by the SDK's (`ClientSecurity.of_client_properties`: metadata, OffsetFetch, log bounds),
with the reason named; with the algorithm empty (`ssl.endpoint.identification.algorithm=`, Kafka's
way to turn it off) the same certificate is accepted. The server is a real TLS listener on 127.0.0.1
presenting a certificate of the trusted CA issued for `elsewhere.example` only.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from quorum.security.certificates import CertificateAuthority
from quorum.security.tls import SslSettings
from quorum.wire.sasl_client import ClientSecurity


@pytest.fixture()
def authority(tmp_path: Path) -> Iterator[CertificateAuthority]:
    yield CertificateAuthority(tmp_path / "ca")


async def handshake(server_pem: Path, client: ssl.SSLContext) -> str | None:
    """Connect `client` to a TLS server on 127.0.0.1 presenting `server_pem`; None when the handshake
    succeeded, else the client's error."""
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(server_pem)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_context)
    port = server.sockets[0].getsockname()[1]
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=client,
                                                                  server_hostname="127.0.0.1"), 10)
        writer.close()
        return None
    except ssl.SSLError as exc:
        return str(exc)
    finally:
        server.close()
        await server.wait_closed()


def node_context(ca: Path, algorithm: str | None) -> ssl.SSLContext:
    props = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca)}
    if algorithm is not None:
        props["ssl.endpoint.identification.algorithm"] = algorithm
    return SslSettings.of(props, "CONTROLLER").client_context()


def sdk_context(ca: Path, algorithm: str | None) -> ssl.SSLContext:
    props = {"security.protocol": "SSL", "ssl.ca.location": str(ca)}
    if algorithm is not None:
        props["ssl.endpoint.identification.algorithm"] = algorithm
    context = ClientSecurity.of_client_properties(props).ssl_context
    assert context is not None
    return context


@pytest.mark.parametrize("make_context", [node_context, sdk_context], ids=["node", "sdk"])
def test_a_certificate_for_another_host_is_refused_naming_the_mismatch(authority, make_context) -> None:
    elsewhere = authority.issue("elsewhere", hosts=("elsewhere.example",))
    for algorithm in (None, "https", "HTTPS"):  # Kafka's default is https
        error = asyncio.run(handshake(elsewhere.pem, make_context(authority.cert_path, algorithm)))
        assert error is not None and "certificate verify failed" in error and "mismatch" in error, (algorithm, error)
    assert asyncio.run(handshake(elsewhere.pem, make_context(authority.cert_path, ""))) is None, "turned off"
    right = authority.issue("right-host")  # 127.0.0.1 and localhost
    assert asyncio.run(handshake(right.pem, make_context(authority.cert_path, "https"))) is None
