"""The bytes of the Spark sink's binary origin stamp (`client_epochs.spark.stamps` says what a stamp means
and how the sink uses it): a format byte, a digest of the query id, the batch and the Spark partition as
unsigned varints, then the record's sequence, 4 bytes big-endian below 2**32 and 8 from there on.
Kept with the other byte layouts of the wire layer, beside the varints it is made of."""

from __future__ import annotations

import struct
from itertools import repeat

from quorum.wire.varint import MAX_VARLONG_BYTES, VarintError, decode_uvarint, encode_uvarlong

STAMP_FORMAT = 1
"""The first byte of a binary stamp."""
DIGEST_BYTES = 8
WIDE_SEQUENCE = 1 << 32
"""The first sequence stamped in 8 bytes rather than 4."""


class StampBytesError(ValueError):
    """Bytes that are not a binary stamp; the message says which part is wrong."""


def stamp_head(digest: bytes, batch: int, task: int) -> bytes:
    """A stamp up to its sequence: the same for every record of a task."""
    return bytes([STAMP_FORMAT]) + digest + encode_uvarlong(batch) + encode_uvarlong(task)


def pack_stamps(head: bytes, first: int, count: int) -> list[bytes]:
    """The stamps of sequences [first, first + count) after `head`, by one `map` of a struct packer (C
    speed, no Python step per record)."""
    if first < WIDE_SEQUENCE < first + count:
        return pack_stamps(head, first, WIDE_SEQUENCE - first) + pack_stamps(
            head, WIDE_SEQUENCE, first + count - WIDE_SEQUENCE)
    pack = struct.Struct(f">{len(head)}s{'I' if first < WIDE_SEQUENCE else 'Q'}").pack
    return list(map(pack, repeat(head, count), range(first, first + count)))


def encode_stamp(digest: bytes, batch: int, task: int, sequence: int) -> bytes:
    width = 4 if sequence < WIDE_SEQUENCE else 8
    return stamp_head(digest, batch, task) + sequence.to_bytes(width, "big")


def decode_stamp(value: bytes) -> tuple[bytes, int, int, int]:
    """(digest, batch, task, sequence) of a binary stamp; StampBytesError for anything else."""
    if len(value) < 1 + DIGEST_BYTES + 3 or value[0] != STAMP_FORMAT:
        raise StampBytesError(f"is not a format-{STAMP_FORMAT} origin stamp")
    try:
        batch, at = decode_uvarint(value, 1 + DIGEST_BYTES, MAX_VARLONG_BYTES)
        task, at = decode_uvarint(value, at, MAX_VARLONG_BYTES)
    except VarintError as exc:
        raise StampBytesError(f"its batch or task: {exc}") from None
    if not 1 <= len(value) - at <= 8:
        raise StampBytesError("its sequence is not 1 to 8 bytes")
    return value[1 : 1 + DIGEST_BYTES], batch, task, int.from_bytes(value[at:], "big")
