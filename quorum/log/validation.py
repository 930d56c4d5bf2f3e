"""The checks every stored batch passes, on append and again when a segment is recovered.

One function for both paths, so what recovery accepts is exactly what append would have written.
Only the header and the CRC are checked: the CRC covers the records, so a batch that passes was
written as its producer (or leader) built it, and decoding every record here would cost as much
as the rest of the append path. baseOffset and partitionLeaderEpoch lie outside the CRC, which
is why continuity of offsets and epochs is checked too: a flipped bit there breaks them.
"""

from __future__ import annotations

from quorum.wire.records import MAGIC, RecordBatch


def batch_fault(batch: RecordBatch, expected_offset: int | None, previous_epoch: int,
                check_crc: bool = True) -> str | None:
    """Why `batch` cannot follow a log ending at `expected_offset` whose last epoch is
    `previous_epoch`, or None when it can. `expected_offset` None skips the offset check.
    `check_crc` False: the caller has just checked it (a leader's append of a produced batch, whose
    patched baseOffset and partitionLeaderEpoch lie outside the CRC), so it is not computed twice."""
    if batch.magic != MAGIC:
        return f"magic {batch.magic}, only v2 batches are stored"
    if check_crc and (stored := batch.crc) != (actual := batch.compute_crc()):
        return f"CRC mismatch: batch says 0x{stored:08x}, bytes give 0x{actual:08x}"
    if batch.last_offset_delta < 0:
        return f"negative lastOffsetDelta {batch.last_offset_delta}"
    if expected_offset is not None and batch.base_offset != expected_offset:
        return f"base offset {batch.base_offset} where offset {expected_offset} comes next"
    epoch = batch.partition_leader_epoch
    if epoch < previous_epoch:
        return f"leader epoch {epoch} after epoch {previous_epoch}: epochs must not decrease"
    return None
