"""The codecs of a record batch body (attribute bits 0-2), as Kafka clients write and read them.

    compress(codec, data) -> bytes
    decompress(codec, data, max_bytes=None) -> bytes

`Compression.NONE` passes the bytes through. A codec that is not one of `Compression` raises
`UnknownCodecError`; a body that does not decompress raises `CompressionError` with the codec
library's complaint (its type and message), whatever type the library raised. Both are
ValueErrors.

What is written is what Java's producer writes: gzip at Kafka's default level, xerial-framed
snappy in 32 KiB blocks, LZ4 frames with independent blocks, zstd frames. What is read is what
any client writes, including librdkafka's raw snappy and Java's size-less zstd frames, and
nothing is silently dropped: bytes after an LZ4 frame and a truncated zstd frame are errors.
"""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import Callable
from enum import IntEnum

import lz4.frame
import zstandard
from kafka import codec as kafka_codec

__all__ = [
    "GZIP_LEVEL",
    "Compression",
    "CompressionError",
    "DecompressedTooLargeError",
    "UnknownCodecError",
    "compress",
    "decompress",
]

#: Kafka's default gzip level (java.util.zip's DEFAULT_COMPRESSION, librdkafka's default too);
#: kafka.codec would otherwise use 9, slower for a few percent of size.
GZIP_LEVEL = 6

_Data = bytes | bytearray | memoryview


class Compression(IntEnum):
    """The codec in attribute bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class CompressionError(ValueError):
    """Data that the named codec cannot decompress."""


class UnknownCodecError(CompressionError):
    """A codec number that is not one of `Compression`."""


class DecompressedTooLargeError(CompressionError):
    """A body whose output would exceed the `max_bytes` the caller allows."""


def compress(codec: Compression | int, data: _Data) -> bytes:
    """`data` compressed with `codec`, framed as Java's producer frames it."""
    return _lookup(_COMPRESSORS, codec)(data)


def decompress(codec: Compression | int, data: _Data, max_bytes: int | None = None) -> bytes:
    """All of `data` decompressed with `codec`; CompressionError if it does not decompress exactly.

    With `max_bytes`, DecompressedTooLargeError when the output would be longer, found by a first pass that
    holds at most `max_bytes` + 1 bytes of output: a few hundred KB of gzip'd zeros otherwise made a broker
    allocate hundreds of MB (the protocol fuzzer's compression bomb, issue 19)."""
    function = _lookup(_DECOMPRESSORS, codec)
    try:
        if max_bytes is not None and codec in _BOUNDED_IN_ONE_PASS:
            return _BOUNDED_IN_ONE_PASS[codec](data, max_bytes)
        if max_bytes is not None and codec != Compression.NONE:
            size = _BOUNDED_SIZES[codec](data, max_bytes + 1)
            if size > max_bytes:
                raise DecompressedTooLargeError(f"decompresses to more than {max_bytes} bytes")
        return function(data)
    except CompressionError:
        raise
    except Exception as exc:  # codec libraries raise a zoo of types on bad input
        raise CompressionError(f"{type(exc).__name__}: {exc}") from exc


def _lookup(table: dict[int, Callable[[_Data], bytes]], codec: Compression | int) -> Callable[[_Data], bytes]:
    try:
        return table[codec]
    except (KeyError, TypeError):  # TypeError: an unhashable codec
        raise UnknownCodecError(f"unknown compression codec {codec!r}") from None


# ---------------------------------------------------------------------------------------------
# The codecs


def _lz4_decompress(data: _Data) -> bytes:
    """One LZ4 frame, as Kafka writes it; lz4.frame is used directly rather than kafka.codec's
    lz4_decode because that silently ignores bytes after the frame, dropping data unnoticed."""
    out, used = lz4.frame.decompress(data, return_bytes_read=True)
    if used != len(data):
        raise ValueError(f"{len(data) - used} bytes after the LZ4 frame")
    return out


_zstd_per_thread = threading.local()


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    """One per thread: a decompressor's context is not safe to share, and a new one costs ~10 us."""
    try:
        return _zstd_per_thread.decompressor
    except AttributeError:
        _zstd_per_thread.decompressor = zstandard.ZstdDecompressor()
        return _zstd_per_thread.decompressor


def _zstd_decompress(data: _Data) -> bytes:
    """All zstd frames in the body, refusing a truncated one.

    kafka.codec's zstd_decode returns b"" for a truncated frame, and the one-shot
    ZstdDecompressor.decompress cannot read the size-less frames Java's ZstdOutputStream writes;
    a decompressobj per frame handles both.
    """
    decompressor = _zstd_decompressor()
    parts = []
    remaining: _Data = data
    while True:
        frame = decompressor.decompressobj()
        parts.append(frame.decompress(remaining))
        if not frame.eof:
            raise ValueError("zstd frame is truncated")
        remaining = frame.unused_data
        if not remaining:
            return b"".join(parts)


def _gzip_compress(data: _Data) -> bytes:
    """MTIME 0 in the gzip header, as Java's GZIPOutputStream writes: the same records compress to the
    same bytes whenever they are compressed (the header's clock made two encodings of one batch differ
    when a second ticked between them)."""
    return gzip.compress(bytes(data), compresslevel=GZIP_LEVEL, mtime=0)


_XERIAL_HEADER = kafka_codec.snappy_encode(b"")


def _snappy_decompress(data: _Data) -> bytes:
    """Xerial-framed (Java) or raw (librdkafka) snappy; kafka.codec detects which.

    Its detection needs at least one block after the 16-byte xerial header, so a header-only
    stream (nothing compressed) is answered here.
    """
    payload = bytes(data)
    if payload == _XERIAL_HEADER:
        return b""
    return kafka_codec.snappy_decode(payload)


# ---------------------------------------------------------------------------------------------
# Output sizes, counted up to a cap without holding more than the cap: the first pass of a bounded
# decompress. Damaged input may count short (the exact pass then names the damage) or raise.


def _gzip_size(data: _Data, cap: int) -> int:
    total, rest = 0, bytes(data)
    while rest and total < cap:
        stream = zlib.decompressobj(16 + zlib.MAX_WBITS)
        while rest and total < cap and not stream.eof:
            total += len(stream.decompress(rest, min(cap - total, _CHUNK)))
            rest = stream.unconsumed_tail
        rest = stream.unused_data if stream.eof else b""
    return total


def _snappy_size(data: _Data, cap: int) -> int:
    """Snappy states each block's length up front (a varint): xerial's blocks, or librdkafka's one raw block."""
    payload = bytes(data)
    if payload[:8] != _XERIAL_HEADER[:8]:
        return _snappy_block_length(payload, 0)
    total, pos = 0, 16
    while pos + 4 <= len(payload) and total < cap:
        size = int.from_bytes(payload[pos:pos + 4], "big", signed=True)
        total += _snappy_block_length(payload, pos + 4)
        pos += 4 + max(size, 0)
    return total


def _snappy_block_length(payload: bytes, pos: int) -> int:
    length, shift = 0, 0
    while pos < len(payload) and shift < 35:
        byte = payload[pos]
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        pos, shift = pos + 1, shift + 7
    return length


def _lz4_size(data: _Data, cap: int) -> int:
    stream = lz4.frame.LZ4FrameDecompressor()
    total, rest = 0, bytes(data)
    while total < cap and not stream.eof:
        total += len(stream.decompress(rest, max_length=min(cap - total, _CHUNK)))
        rest = b""  # the decompressor keeps what it has not decompressed yet
        if stream.needs_input:
            break  # all input used and the frame not ended: the exact pass names the truncation
    return total


def _lz4_within(data: _Data, max_bytes: int) -> bytes:
    """The frame's output in one pass that never holds more than `max_bytes` + 1 bytes of it.

    Every Produce of lz4 batches comes this way (the leader checks their records), and a size pass
    followed by the exact pass decompressed each body twice: half of a broker's CPU for lz4 produce.
    A frame that ends early is handed to the exact pass, so its error is the library's, as before."""
    stream = lz4.frame.LZ4FrameDecompressor()
    chunks, total, rest = [], 0, bytes(data)
    while not stream.eof:
        chunk = stream.decompress(rest, max_length=min(max_bytes + 1 - total, _CHUNK))
        rest = b""  # the decompressor keeps what it has not decompressed yet
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            raise DecompressedTooLargeError(f"decompresses to more than {max_bytes} bytes")
        if stream.needs_input and not stream.eof:
            return _lz4_decompress(data)  # all input used and the frame not ended: names the damage
    if stream.unused_data:
        raise ValueError(f"{len(stream.unused_data)} bytes after the LZ4 frame")
    return b"".join(chunks)


def _zstd_size(data: _Data, cap: int) -> int:
    total = 0
    with _zstd_decompressor().stream_reader(bytes(data), read_across_frames=True) as reader:
        while total < cap:
            chunk = reader.read(min(cap - total, _CHUNK))
            if not chunk:
                break
            total += len(chunk)
    return total


_CHUNK = 1 << 20

_BOUNDED_IN_ONE_PASS: dict[int, Callable[[_Data, int], bytes]] = {Compression.LZ4: _lz4_within}
"""Codecs decompressed within a bound in one pass; the others take a size pass first (`_BOUNDED_SIZES`)."""

_BOUNDED_SIZES: dict[int, Callable[[_Data, int], int]] = {
    Compression.GZIP: _gzip_size,
    Compression.SNAPPY: _snappy_size,
    Compression.LZ4: _lz4_size,
    Compression.ZSTD: _zstd_size,
}

_COMPRESSORS: dict[int, Callable[[_Data], bytes]] = {
    Compression.NONE: bytes,
    Compression.GZIP: _gzip_compress,
    Compression.SNAPPY: kafka_codec.snappy_encode,  # xerial framing, 32 KiB blocks, as Java writes
    Compression.LZ4: kafka_codec.lz4_encode,  # LZ4 frame with independent blocks, as Kafka needs
    Compression.ZSTD: kafka_codec.zstd_encode,
}

_DECOMPRESSORS: dict[int, Callable[[_Data], bytes]] = {
    Compression.NONE: bytes,
    Compression.GZIP: kafka_codec.gzip_decode,
    Compression.SNAPPY: _snappy_decompress,
    Compression.LZ4: _lz4_decompress,
    Compression.ZSTD: _zstd_decompress,
}
