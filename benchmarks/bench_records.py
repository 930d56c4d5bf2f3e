"""Record batch v2: build and parse throughput (records per second), ours beside kafka-python's.

Run: `./run bench` (all benchmarks), `.venv/bin/python -m benchmarks.bench_records`, or
`.venv/bin/python benchmarks/bench_records.py`.

"build" encodes a batch from records already in memory: `build_batch` against kafka-python's
DefaultRecordBatchBuilder (append per record, then build). "parse" checks the CRC and decodes
every record: `RecordBatch.validate()` plus its records against DefaultRecordBatch.validate_crc()
plus iteration. Both sides parse the same bytes and compress with the same kafka.codec function,
so a compressed row shows how much the codec itself weighs next to the record framing.

"produce validation" is the leader's check of a Produce batch (`validate_produced_batch`: CRC,
then every record's structure and offset delta walked without building records) beside the check
it replaced, which decoded every record and then compared offsets, on batches of the size
librdkafka sends (about 1 MB of 1 KiB or 10 KiB values): the figure that bounds a broker's produce
rate. The walk runs compiled (`quorum.wire._walk`) and, beside it, in Python alone (the reference,
`QUORUM_PURE_PYTHON=1`'s path); "ms CPU/MB" is this process's CPU time per MB of values (issue 37's
in-process measure), steadier than the rates on a shared machine.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `quorum` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder  # noqa: E402

from benchmarks.table import print_table, progress, rate  # noqa: E402
from quorum.wire import records as records_module  # noqa: E402
from quorum.wire.records import (  # noqa: E402
    Compression,
    Record,
    RecordBatch,
    build_batch,
    validate_produced_batch,
)

#: (records per batch, value bytes): a typical producer batch first, then small and large records.
SHAPES = ((1_000, 100), (100, 100), (1_000, 10), (10, 10_000))
#: Produce batches: librdkafka's 1 MB batch.size filled with 1 KiB and 10 KiB values, then small records.
VALIDATION_SHAPES = ((1_000, 1_024), (100, 10_240), (10_000, 100))
CODECS = (Compression.NONE, Compression.LZ4)
SECONDS_PER_MEASUREMENT = 0.4
BASE_TIMESTAMP = 1_763_700_000_000


def make_records(count: int, value_size: int) -> list[Record]:
    """Keyed records with JSON-ish values that compress about as well as real payloads do."""
    rng = random.Random(count * 7 + value_size)
    records = []
    for i in range(count):
        text = b"".join(
            b'{"id":%d,"user":"u%d","amount":%d},' % (i, rng.randrange(5000), rng.randrange(10**6))
            for _ in range(value_size // 30 + 1)
        )
        records.append(Record(i, BASE_TIMESTAMP + i // 10, b"key-%d" % rng.randrange(10_000), text[:value_size]))
    return records


def kafka_python_build(rows: list[tuple], compression: Compression) -> bytearray:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=compression, is_transactional=False,
        producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 30,
    )  # fmt: skip
    append = builder.append
    for offset, timestamp, key, value, headers in rows:
        append(offset, timestamp, key, value, headers)
    return builder.build()


def kafka_python_parse(data: bytes) -> list:
    batch = DefaultRecordBatch(data)
    if not batch.validate_crc():
        raise AssertionError("kafka-python found a bad CRC")
    return list(batch)


def our_parse(data: bytes) -> list[Record]:
    batch = RecordBatch(data)
    batch.validate()
    return batch.records()


def validate_by_decoding(data: bytes) -> RecordBatch:
    """The produce validation before the structure walk: CRC, every record decoded, then offsets."""
    batch = RecordBatch(data)
    batch.validate()
    for index, record in enumerate(batch.records()):
        if record.offset != index:
            raise AssertionError(f"record {index} has offset {record.offset}")
    return batch


def walked_in_python(check: Callable[[], object]) -> Callable[[], object]:
    """`check` with the compiled walk switched off, as QUORUM_PURE_PYTHON=1 switches it off."""

    def run() -> object:
        compiled, records_module._compiled_walk = records_module._compiled_walk, None
        try:
            return check()
        finally:
            records_module._compiled_walk = compiled

    return run


def measure_validation(count: int, value_size: int, compression: Compression) -> tuple[object, ...]:
    """One table row: records per second through the leader's check, walked compiled, walked in
    Python and decoded, and the CPU per MB of values of both walks, to set beside bench_broker's
    produce figures."""
    data = build_batch(make_records(count, value_size), compression=compression)
    limit = len(data)
    assert validate_produced_batch(data, limit).records_count == validate_by_decoding(data).records_count == count
    shape = f"{count:,} x {value_size:,} B"
    progress(f"produce validation {shape}, {compression.name.lower()}: {len(data):,} bytes per batch")
    compiled = lambda: validate_produced_batch(data, limit)  # noqa: E731
    python = walked_in_python(compiled)
    rates = [rate(check, SECONDS_PER_MEASUREMENT) * count for check in (compiled, python)]
    decoded = rate(lambda: validate_by_decoding(data), SECONDS_PER_MEASUREMENT) * count
    megabytes = count * value_size / 1e6  # MB of values, as bench_broker counts them
    cpu = [1e3 / (rate(check, SECONDS_PER_MEASUREMENT, clock=time.process_time) * megabytes)
           for check in (compiled, python)]  # fmt: skip
    built = "" if records_module._compiled_walk is not None else " (not built)"
    return (shape, compression.name.lower(), f"{rates[0]:,.0f}{built}", rates[1], decoded,
            f"{rates[0] / rates[1]:.1f}x", f"{cpu[0]:.3f}", f"{cpu[1]:.3f}")  # fmt: skip


def measure(count: int, value_size: int, compression: Compression) -> list[tuple[object, ...]]:
    """Two table rows (build, parse) for one batch shape and codec."""
    records = make_records(count, value_size)
    rows = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]
    data = build_batch(records, compression=compression)
    theirs = bytes(kafka_python_build(rows, compression))
    assert our_parse(theirs) == records and len(kafka_python_parse(data)) == count
    shape = f"{count:,} x {value_size:,} B"
    progress(f"{shape}, {compression.name.lower()}: {len(data):,} bytes per batch")

    build_ours = rate(lambda: build_batch(records, compression=compression), SECONDS_PER_MEASUREMENT) * count
    build_theirs = rate(lambda: kafka_python_build(rows, compression), SECONDS_PER_MEASUREMENT) * count
    parse_ours = rate(lambda: our_parse(data), SECONDS_PER_MEASUREMENT) * count
    parse_theirs = rate(lambda: kafka_python_parse(data), SECONDS_PER_MEASUREMENT) * count
    codec = compression.name.lower()
    return [
        (shape, codec, "build", build_ours, build_theirs, f"{build_ours / build_theirs:.1f}x"),
        (shape, codec, "parse + CRC", parse_ours, parse_theirs, f"{parse_ours / parse_theirs:.1f}x"),
    ]


def main() -> None:
    rows = [row for count, size in SHAPES for codec in CODECS for row in measure(count, size, codec)]
    print_table(
        "Record batch v2 (records per second; one batch per call)",
        ["batch", "codec", "operation", "quorum.wire", "kafka-python", "ours / kafka-python"],
        rows,
    )
    validation = [measure_validation(count, size, codec) for count, size in VALIDATION_SHAPES for codec in CODECS]
    print_table(
        "Produce validation (records per second; one batch per call)",
        ["batch", "codec", "walk, compiled", "walk, Python", "decode", "compiled / Python",
         "ms CPU/MB compiled", "ms CPU/MB Python"],
        validation,
    )


if __name__ == "__main__":
    main()
