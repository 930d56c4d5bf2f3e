"""Which bytes of a segment a read returns, found without reading the records (zero-copy Fetch).

`Log.read` reads the batches into memory and walks them to cut at the size limit and the high
watermark. A Fetch answer need not hold them at all (`quorum.wire.spliced`): it needs only where
they are. This finds the same span from the indexes and a few batch headers: the batch holding
the offset, the end of the last whole batch within `max_bytes` (the first batch whole however
large, KIP-74), and no batch that starts at or past `upto`. The header walk starts at the last
indexed batch before the size limit, so it reads at most an index interval of headers, whatever
the size of the read.
"""

from __future__ import annotations

from quorum.log.segment import LogSegment
from quorum.wire.spliced import FileRecords


def segment_span(segment: LogSegment, offset: int, max_bytes: int, upto: int | None) -> tuple[int, int]:
    """(position, length) of the whole batches `Log.read(offset, max_bytes, upto)` would return
    from `segment`, which holds `offset` below `upto`."""
    position, first = segment.find(offset)
    first_end = position + first.size_in_bytes
    end = segment.size
    if upto is not None and upto < segment.next_offset:
        at, holding = segment.find(upto)
        end = at if holding.base_offset >= upto else at + holding.size_in_bytes
    limit = max(position + max_bytes, first_end)
    if end <= limit:
        return position, end - position
    assert segment.index is not None
    cut = max(first_end, segment.index.lookup_position(limit))
    for at, header in segment.iter_headers(cut):
        after = at + header.size_in_bytes
        if after > limit or after > end:
            break
        cut = after
    return position, cut - position


def open_span(segment: LogSegment, offset: int, max_bytes: int, upto: int | None) -> FileRecords | None:
    """The span as `FileRecords` on a descriptor of its own (None when it is empty); call with
    the log's lock held, so that the segment is not closed under it."""
    position, length = segment_span(segment, offset, max_bytes, upto)
    return segment.open_span(position, length) if length > 0 else None
