"""Bad input on one connection closes that connection only; the node keeps serving everyone else."""

from __future__ import annotations

import socket
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse

from tests.conftest import DEMO_TOPICS


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def metadata_round_trip(sock: socket.socket, correlation_id: int) -> list[str]:
    request = MetadataRequest(topics=None, version=12)
    request.with_header(correlation_id=correlation_id, client_id="healthy")
    sock.sendall(request.encode(header=True, framed=True))
    size = struct.unpack(">i", _recv_exactly(sock, 4))[0]
    response = MetadataResponse.decode(_recv_exactly(sock, size), version=12, header=True)
    assert response.header.correlation_id == correlation_id
    return sorted(t.name for t in response.topics)


def send_garbage_and_wait_for_close(address: tuple[str, int], garbage: bytes) -> None:
    """Send garbage; the node must answer or close, never leave the connection hanging forever."""
    with socket.create_connection(address, timeout=10) as bad:
        bad.sendall(garbage)
        bad.shutdown(socket.SHUT_WR)
        while bad.recv(65536):
            pass


EXPECTED = sorted(spec.split(":")[0] for spec in DEMO_TOPICS)

frames = st.one_of(
    st.binary(max_size=200),
    st.binary(max_size=200).map(lambda body: struct.pack(">i", len(body)) + body),
    st.tuples(st.sampled_from([0, 1, 3, 8, 11, 18, 19, 52, 59, 99, 1000, -1]), st.integers(-2, 20),
              st.binary(max_size=120)).map(
        lambda t: struct.pack(">i", 8 + len(t[2])) + struct.pack(">hhi", t[0], t[1], 5) + t[2]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(garbage=frames)
def test_garbage_on_one_connection_never_stops_the_node(standalone_node, garbage):
    address = (standalone_node.host, standalone_node.port)
    with socket.create_connection(address, timeout=10) as healthy:
        assert metadata_round_trip(healthy, 1) == EXPECTED
        send_garbage_and_wait_for_close(address, garbage)
        assert metadata_round_trip(healthy, 2) == EXPECTED


def test_oversized_frame_is_refused_and_logged(standalone_node):
    address = (standalone_node.host, standalone_node.port)
    with socket.create_connection(address, timeout=10) as bad:
        bad.sendall(struct.pack(">i", 2**31 - 1))
        assert bad.recv(10) == b"", "the node should close a connection announcing a 2 GiB frame"
    standalone_node.wait_for_output(r"closing connection from .*frame size 2147483647 is outside")
    with socket.create_connection(address, timeout=10) as healthy:
        assert metadata_round_trip(healthy, 3) == EXPECTED
