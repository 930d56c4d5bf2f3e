"""A connection whose reading the frame reader paused (frames read ahead past READ_AHEAD_BYTES) still
writes and drains its answers: the reader's own pause flag once shared asyncio FlowControlMixin's
`_paused`, which `StreamWriter.drain()` takes for "the transport's write buffer is full", so the first
answer written while reading was paused waited forever. acks=all RF=3 produce of 1 MB batches (two
frames read ahead while the first waits for the followers) hung that way in bench_replication."""

from __future__ import annotations

import asyncio
import struct

from quorum.net.frame_reader import READ_AHEAD_BYTES, FrameReader


def test_an_answer_written_while_reading_is_paused_drains() -> None:
    async def run() -> list[int]:
        answered: list[int] = []
        done = asyncio.get_running_loop().create_future()

        async def serve(reader: FrameReader, writer: asyncio.StreamWriter) -> None:
            first = await reader.next_frame()
            await asyncio.sleep(0.2)  # the next large frame arrives and pauses reading meanwhile
            writer.write(struct.pack(">i", len(first)))
            await asyncio.wait_for(writer.drain(), 60)  # hung before: drain saw the reader's pause flag
            answered.append(len(first))
            answered.append(len(await reader.next_frame()))
            done.set_result(None)

        server = await asyncio.get_running_loop().create_server(lambda: FrameReader(8 << 20, serve), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            big = bytes(READ_AHEAD_BYTES + 1)
            writer.write(struct.pack(">i", 10) + bytes(10) + struct.pack(">i", len(big)) + big)
            await writer.drain()
            assert struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 60))[0] == 10
            await asyncio.wait_for(done, 60)
        finally:
            writer.close()
            server.close()
        return answered

    assert asyncio.run(run()) == [10, READ_AHEAD_BYTES + 1]
