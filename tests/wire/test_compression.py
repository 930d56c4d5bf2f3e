"""The batch body codecs on their own: round trips, kafka.codec as the oracle, and the errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka import codec as kafka_codec

from quorum.wire import compression, records
from quorum.wire.compression import (
    Compression,
    CompressionError,
    DecompressedTooLargeError,
    UnknownCodecError,
    compress,
    decompress,
)

KAFKA_DECODE = {
    Compression.GZIP: kafka_codec.gzip_decode,
    Compression.SNAPPY: kafka_codec.snappy_decode,
    Compression.LZ4: kafka_codec.lz4_decode,
    Compression.ZSTD: kafka_codec.zstd_decode,
}


def test_records_re_exports_the_enum() -> None:
    assert records.Compression is Compression
    assert "Compression" in records.__all__


@given(st.sampled_from(list(Compression)), st.binary(max_size=70_000))
def test_round_trip(codec: Compression, data: bytes) -> None:
    packed = compress(codec, data)
    assert decompress(codec, packed) == data
    assert decompress(int(codec), memoryview(packed)) == data
    if codec in KAFKA_DECODE and data:
        assert KAFKA_DECODE[codec](packed) == data


def test_none_passes_bytes_through() -> None:
    assert compress(Compression.NONE, bytearray(b"abc")) == b"abc"
    assert decompress(Compression.NONE, memoryview(b"abc")) == b"abc"


@pytest.mark.parametrize("codec", [5, 7, -1, "gzip", None])
def test_unknown_codec(codec: object) -> None:
    for function in (compress, decompress):
        with pytest.raises(UnknownCodecError, match="unknown compression codec") as caught:
            function(codec, b"data")  # type: ignore[arg-type]
        assert isinstance(caught.value, CompressionError) and isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("codec", "data", "complaint"),
    [
        (Compression.GZIP, b"not gzip", None),
        (Compression.SNAPPY, b"\x82SNAPPY\x00" + b"\x00" * 8 + b"\xff\xff\xff\xfc", None),
        (Compression.LZ4, compress(Compression.LZ4, b"x" * 100) + b"junk", "ValueError: 4 bytes after the LZ4 frame"),
        (Compression.ZSTD, compress(Compression.ZSTD, b"x" * 100)[:-4], "ValueError: zstd frame is truncated"),
    ],
)
def test_damaged_input_raises_compression_error_naming_the_library_complaint(
    codec: Compression, data: bytes, complaint: str | None
) -> None:
    with pytest.raises(CompressionError, match=complaint) as caught:
        decompress(codec, data)
    assert not isinstance(caught.value, UnknownCodecError)
    assert caught.value.__cause__ is not None
    assert str(caught.value).startswith(f"{type(caught.value.__cause__).__name__}: ")


def test_gzip_uses_kafkas_default_level() -> None:
    data = b"some fairly compressible text " * 200
    assert compress(Compression.GZIP, data)[8] == 0  # FLG/XFL: level 6 sets no "best/fastest" flag
    assert len(compress(Compression.GZIP, data)) == len(kafka_codec.gzip_encode(data, compresslevel=6))


@pytest.mark.parametrize("codec", [c for c in Compression if c is not Compression.NONE])
def test_a_body_that_decompresses_past_max_bytes_is_refused(codec: Compression) -> None:
    """A compression bomb (issue 19: 300 KB of gzip'd zeros made a broker allocate 600 MB) is refused by a
    first pass that never holds more than max_bytes + 1 bytes; exactly max_bytes still decompresses."""
    data = bytes(range(256)) + b"\x00" * 3_000_000
    packed = compress(codec, data)
    assert decompress(codec, packed, max_bytes=len(data)) == data
    with pytest.raises(DecompressedTooLargeError, match=f"more than {len(data) - 1} bytes"):
        decompress(codec, packed, max_bytes=len(data) - 1)
    with pytest.raises(CompressionError):
        decompress(codec, packed[: len(packed) // 2], max_bytes=len(data))  # damage is still named


def test_a_batch_whose_body_decompresses_past_the_limit_is_corrupt(monkeypatch) -> None:
    monkeypatch.setattr(records, "MAX_DECOMPRESSED_BATCH_BYTES", 1_000)
    batch = records.build_batch([records.Record(offset=0, timestamp=0, value=b"\x00" * 2_000)],
                                compression=Compression.GZIP)
    with pytest.raises(records.CorruptRecordError, match="decompresses to more than 1000 bytes"):
        records.RecordBatch(batch).validate()


def test_bounded_lz4_is_decompressed_once(monkeypatch) -> None:
    """Every lz4 Produce body is decompressed within MAX_DECOMPRESSED_BATCH_BYTES: one pass, not a size
    pass and then the exact one (that was half of a broker's lz4 produce CPU)."""
    data = bytes(range(256)) * 10_000
    packed = compress(Compression.LZ4, data)

    def second_pass(*_args: object) -> object:
        raise AssertionError("decompressed a second time")

    monkeypatch.setattr(compression, "_lz4_size", second_pass)
    monkeypatch.setattr(compression.lz4.frame, "decompress", second_pass)
    assert decompress(Compression.LZ4, memoryview(bytearray(packed)), max_bytes=len(data)) == data
