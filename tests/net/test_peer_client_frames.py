"""The peer client's buffered response reader (`ResponseFrames`: small answers many per recv_into,
a large one into its own buffer): fed by hand as asyncio's transports feed it, and through real
sockets against a scripted peer that cuts its answers at every byte, closes mid-frame, or announces
a frame past the limit."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable

import pytest

from quorum.net.frame_reader import FIRST_FRAME_BYTES
from quorum.net.peer_client import RESPONSE_STAGING_BYTES, PeerClient, PeerUnavailable, ResponseFrames
from quorum.wire.errors import WireError
from quorum.wire.framing import FrameTooLargeError
from quorum.wire.protocol import APIS, decode_request, encode_response

API_VERSIONS = APIS[18]
METADATA = APIS[3]


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def feed(frames: ResponseFrames, data: bytes, chunk: int) -> None:
    """What a transport does: ask for a buffer, write at most `chunk` bytes of `data` into it, report them."""
    pos = 0
    while pos < len(data):
        buffer = frames.get_buffer(-1)
        assert len(buffer) > 0
        n = min(chunk, len(buffer), len(data) - pos)
        buffer[:n] = data[pos:pos + n]
        frames.buffer_updated(n)
        pos += n


def take_all(fed: Callable[[ResponseFrames], None], max_frame_bytes: int = 1 << 20) \
        -> tuple[list[bytes], BaseException | None]:
    """A reader made on a running loop (as a connection makes it), fed by `fed`; its frames, then its failure."""
    async def run() -> tuple[list[bytes], BaseException | None]:
        frames = ResponseFrames(max_frame_bytes)
        fed(frames)
        got = []
        while True:
            try:
                got.append(bytes(await asyncio.wait_for(frames.next_frame(), 60)))
            except (WireError, asyncio.IncompleteReadError, OSError) as exc:
                return got, exc

    return asyncio.run(run())


PAYLOADS = [b"", b"x", bytes(range(256)) * 3, b"last one"]
STREAM = b"".join(framed(p) for p in PAYLOADS)


@pytest.mark.parametrize("chunk", [1, 2, 3, 4, 5, 7, 64, len(STREAM)])
def test_frames_come_out_whole_however_the_bytes_are_cut(chunk: int) -> None:
    got, end = take_all(lambda frames: (feed(frames, STREAM, chunk), frames.eof_received()))
    assert got == PAYLOADS
    assert isinstance(end, asyncio.IncompleteReadError) and end.partial == b""


@pytest.mark.parametrize("chunk", [1000, RESPONSE_STAGING_BYTES + 1, 1 << 20])
def test_a_large_answer_is_read_into_one_buffer_of_its_declared_size_between_small_ones(chunk: int) -> None:
    """What a follower's Fetch answer needs (issue 20): once its prefix is read, the rest is asked for
    in one buffer of the declared size, not grown from FIRST_FRAME_BYTES as a request's is (each
    doubling a copy of what had arrived)."""
    large = bytes(range(256)) * (3 * FIRST_FRAME_BYTES // 256)
    stream = framed(b"small") + framed(large) + framed(b"after")
    asked: list[int] = []

    def fed(frames: ResponseFrames) -> None:
        pos = 0
        while pos < len(stream):
            buffer = frames.get_buffer(-1)
            asked.append(len(buffer))
            n = min(chunk, len(buffer), len(stream) - pos)
            buffer[:n] = stream[pos:pos + n]
            frames.buffer_updated(n)
            pos += n
        frames.eof_received()

    got, _ = take_all(fed, max_frame_bytes=4 * FIRST_FRAME_BYTES)
    assert got == [b"small", large, b"after"]
    assert max(asked) > len(large) - RESPONSE_STAGING_BYTES, max(asked)  # the whole rest, in one buffer
    assert asked[0] == RESPONSE_STAGING_BYTES  # small answers through the staging buffer


def test_a_stream_cut_at_every_byte_gives_the_whole_frames_before_it_and_the_partial_one() -> None:
    for cut in range(len(STREAM)):
        got, end = take_all(lambda frames, cut=cut: (feed(frames, STREAM[:cut], 3), frames.eof_received()))
        whole, pos = [], 0
        for payload in PAYLOADS:
            if pos + 4 + len(payload) > cut:
                break
            whole.append(payload)
            pos += 4 + len(payload)
        assert got == whole, cut
        assert isinstance(end, asyncio.IncompleteReadError), cut
        assert end.partial == (STREAM[pos + 4:cut] if cut - pos >= 4 else b""), cut


def test_a_frame_past_the_limit_is_refused_before_its_buffer_is_made_and_nothing_after_it_is_read() -> None:
    got, end = take_all(lambda frames: feed(frames, framed(b"fine") + struct.pack(">i", 101) + framed(b"never"), 1),
                        100)
    assert got == [b"fine"]
    assert isinstance(end, FrameTooLargeError) and "101" in str(end)
    assert isinstance(take_all(lambda frames: feed(frames, struct.pack(">i", -1), 4), 100)[1], FrameTooLargeError)


def test_a_connection_error_comes_after_the_frames_that_arrived_whole() -> None:
    got, end = take_all(lambda frames: (feed(frames, framed(b"one") + framed(b"two")[:5], 5),
                                        frames.connection_lost(ConnectionResetError("reset by peer"))))
    assert got == [b"one"] and isinstance(end, ConnectionResetError)


# -- through real sockets --------------------------------------------------------------------------


Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def serve(answer: Answer) -> tuple[asyncio.Server, int]:
    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def read_request(reader: asyncio.StreamReader) -> object:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return decode_request(await reader.readexactly(size))


def metadata_answer(request: object, brokers: int) -> bytes:
    body = METADATA.response(throttle_time_ms=0, cluster_id="c", controller_id=1, topics=[], brokers=[
        METADATA.response.MetadataResponseBroker(node_id=i, host=f"h{i}", port=9000 + i, rack=None)
        for i in range(brokers)])
    return encode_response(request, body)  # type: ignore[arg-type]


def metadata_request() -> object:
    return METADATA.request(topics=[], allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def test_answers_written_one_byte_at_a_time_are_read_whole_and_in_order() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for brokers in (1, 300):  # a small answer and one of ~5 KB
            data = metadata_answer(await read_request(reader), brokers)
            for i in range(len(data)):
                writer.write(data[i:i + 1])
                await writer.drain()
        await reader.read()  # until the client closes

    async def run() -> list[int]:
        server, port = await serve(answer)
        client = PeerClient("127.0.0.1", port, "test", 60_000)
        try:
            found = []
            for _ in range(2):
                body = await client.request(METADATA, 12, metadata_request())
                found.append(len(body.brokers))
            return found
        finally:
            await client.close()
            server.close()

    assert asyncio.run(run()) == [1, 300]


def test_a_peer_closing_mid_answer_fails_the_request_as_gone_and_the_next_connects_again() -> None:
    answered = 0

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal answered
        data = metadata_answer(await read_request(reader), 3)
        answered += 1
        if answered == 1:
            writer.write(data[:len(data) // 2])  # half the answer, then the end of the connection
            await writer.drain()
            writer.close()
            return
        writer.write(data)
        await writer.drain()
        await reader.read()

    async def run() -> tuple[PeerUnavailable, int]:
        server, port = await serve(answer)
        client = PeerClient("127.0.0.1", port, "test", 60_000)
        try:
            with pytest.raises(PeerUnavailable) as failed:
                await client.request(METADATA, 12, metadata_request())
            body = await client.request(METADATA, 12, metadata_request())
            return failed.value, len(body.brokers)
        finally:
            await client.close()
            server.close()

    failure, brokers = asyncio.run(run())
    assert failure.gone and "IncompleteReadError" in str(failure)
    assert brokers == 3


def test_an_answer_announced_past_the_limit_fails_the_request_and_closes_the_connection() -> None:
    async def run() -> str:
        ended = asyncio.Event()

        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(struct.pack(">i", 1 << 20) + bytes(100))
            await writer.drain()
            try:
                await reader.read()  # the client closes without waiting for the body (a reset, as unread bytes remain)
            except ConnectionError:
                pass
            finally:
                ended.set()
                writer.close()

        server, port = await serve(answer)
        client = PeerClient("127.0.0.1", port, "test", 60_000, max_frame_bytes=64 * 1024)
        try:
            with pytest.raises(PeerUnavailable) as failed:
                await client.request(API_VERSIONS, 3, API_VERSIONS.request(client_software_name="t",
                                                                           client_software_version="1"))
            await asyncio.wait_for(ended.wait(), 60)  # the server saw the connection end
            return str(failed.value)
        finally:
            await client.close()
            server.close()

    message = asyncio.run(run())
    assert "1048576" in message and "outside" in message
