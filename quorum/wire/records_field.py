"""A Produce request's records, decoded as a view of the request's own bytes instead of a copy.

kafka-python's schema engine decodes every `records` field as `bytes(data[pos:pos+n])`: for a Produce
request that copies the whole batch, a megabyte per request at a client's default batch size, only
for the leader to copy it again to patch offsets. `decode_records_as_views` makes the engine emit a
slice of the frame instead (the decoder always reads a memoryview, `protocol.decode_body`): a
`memoryview` that is writable when the frame is (the listener's frames are bytearrays the request
owns, `quorum.net.frame_reader`), so the leader validates and patches the batch where it lies
(`quorum.broker.partition.Partition.append_as_leader`). A view of a read-only frame (bytes) is
read-only, and the leader copies it before patching, as it always did.

Only the Produce request's field changes: Fetch and FetchSnapshot responses keep bytes, which their
readers keep after the frame is gone.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.schemas.fields.codecs import Bytes
from kafka.protocol.schemas.fields.codecs.types import UnsignedVarInt32


class RecordsView(Bytes):
    """The `records` codec, decoding to a slice of the frame (encoding is Bytes', which takes any buffer)."""

    @classmethod
    def emit_decode_from(cls, ctx: Any, var_name: str, indent: str, compact: bool = False) -> None:
        size = ctx.next_var("ln")
        if compact:
            UnsignedVarInt32.emit_decode_from(ctx, size, indent)
            ctx.emit(indent, f"{size} -= 1")
        else:
            ctx.emit(indent, f'{size} = unpack_from(">i", data, pos)[0]')
            ctx.emit(indent, "pos += 4")
        ctx.emit(indent, f"if {size} < 0:")
        ctx.emit(indent, f"    {var_name} = None")
        ctx.emit(indent, "else:")
        ctx.emit(indent, f"    {var_name} = data[pos:pos+{size}]")
        ctx.emit(indent, f"    pos += {size}")


def decode_records_as_views(field: Any) -> None:
    """Give every `records` field under `field` (a message's `_struct`) the RecordsView codec; before the
    engine compiles a decoder for it (a frame cut inside the records still fails `decode_body`'s
    length check, as with Bytes)."""
    if getattr(field, "_type_str", None) == "records":
        field._type = RecordsView
    for child in getattr(field, "_fields", None) or ():
        decode_records_as_views(child)
    inner = getattr(field, "array_of", None)
    if inner is not None:
        decode_records_as_views(inner)
