"""The `kafka_epochs` sink's options and input columns, sans-IO: checked on the driver, before any task runs.

Spark's Kafka sink is the model: `kafka.bootstrap.servers`, a `topic` option that overrides a `topic`
column, `key` and `value` columns of string or binary, a `headers` column of
array<struct<key: string, value: binary>>, an int `partition` column (null: the partitioner picks),
other columns ignored, producer settings as `kafka.*`. `kafka.key.serializer` and
`kafka.value.serializer` are refused as Spark refuses them (keys and values are written as given);
`kafka.acks`, `kafka.enable.idempotence` and `kafka.transactional.id` are refused because the
exactly-once rule rests on them (`client_epochs.spark.stamps`). `includeHeaders` (default true) lets
a pipeline pass its source's options to the sink: false leaves a `headers` column unwritten.
The sink's own: `tailChunk` and `tailLimit` (the tail scan's step and bound, records per partition),
`deliveryTimeoutMs` (how long a task waits for its records to be acknowledged, Kafka's
delivery.timeout.ms, default 120000 as Spark's producer) and `abortWaitMs` (how long an aborted
micro-batch holds its query before the query stops, default 3000: see `KafkaEpochsStreamWriter.abort`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from client_epochs.spark.options import positive_int
from quorum.wire.sasl_client import sasl_login_of_client_properties

DEFAULT_TAIL_CHUNK = 2000
DEFAULT_TAIL_LIMIT = 100_000
DEFAULT_DELIVERY_TIMEOUT_MS = 120_000
DEFAULT_ABORT_WAIT_MS = 3_000
"""PySpark's `spark.python.task.killTimeout` (2 s: how long a cancelled task's Python worker may go on
before it is killed) and a second for the requests it had in flight."""

_KNOWN = {"topic", "includeheaders", "tailchunk", "taillimit", "deliverytimeoutms", "abortwaitms", "path",
          "checkpointlocation"}
_SPARK_REFUSED = {
    "key.serializer": "keys are written as the key column gives them (string or binary)",
    "value.serializer": "values are written as the value column gives them (string or binary)",
}
_RESERVED = {
    "acks": "the sink writes with acks=all",
    "enable.idempotence": "the sink's producers are idempotent",
    "transactional.id": "the sink is exactly once without transactions (client_epochs.spark.stamps)",
}
_COLUMN_TYPES = {
    "key": ("string", "binary"),
    "value": ("string", "binary"),
    "topic": ("string",),
    "partition": ("int",),
    "headers": ("array<struct<key:string,value:binary>>",),
}


class SinkOptionError(ValueError):
    """An option or an input column of the `kafka_epochs` sink is missing, unknown or malformed; the
    message names it."""


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """The sink's checked options; `producer` holds the `kafka.*` settings without their prefix."""

    bootstrap: str
    producer: Mapping[str, str]
    topic: str | None = None
    include_headers: bool = True
    tail_chunk: int = DEFAULT_TAIL_CHUNK
    tail_limit: int = DEFAULT_TAIL_LIMIT
    delivery_timeout_ms: int = DEFAULT_DELIVERY_TIMEOUT_MS
    abort_wait_ms: int = DEFAULT_ABORT_WAIT_MS


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Check and convert the sink's options (names without regard to case, as Spark's)."""
    by_lower = {key.lower(): value for key, value in options.items()}
    producer = {key[len("kafka.") :]: value for key, value in options.items() if key.lower().startswith("kafka.")}
    bootstrap = producer.pop("bootstrap.servers", None)
    if not bootstrap:
        raise SinkOptionError("option kafka.bootstrap.servers is required (host:port,...)")
    for name, why in (_SPARK_REFUSED | _RESERVED).items():
        if name in producer:
            raise SinkOptionError(f"option kafka.{name} is not supported: {why}")
    try:
        sasl_login_of_client_properties(producer)
    except ValueError as exc:
        raise SinkOptionError(f"option kafka.{exc}") from None
    unknown = sorted(key for key in options if not key.lower().startswith("kafka.") and key.lower() not in _KNOWN)
    if unknown:
        raise SinkOptionError(
            f"unknown sink option(s) {unknown}; known: topic, includeHeaders, tailChunk, "
            "tailLimit, deliveryTimeoutMs, abortWaitMs and kafka.*"
        )
    topic = by_lower.get("topic")
    if topic is not None and not topic.strip():
        raise SinkOptionError("option topic is empty")
    headers = (by_lower.get("includeheaders") or "true").strip().lower()
    if headers not in ("true", "false"):
        raise SinkOptionError(f"option includeHeaders must be true or false, got {by_lower['includeheaders']!r}")
    return SinkOptions(
        bootstrap=bootstrap,
        producer=producer,
        topic=topic.strip() if topic else None,
        include_headers=headers == "true",
        tail_chunk=_positive("tailChunk", by_lower.get("tailchunk"), DEFAULT_TAIL_CHUNK),
        tail_limit=_positive("tailLimit", by_lower.get("taillimit"), DEFAULT_TAIL_LIMIT),
        delivery_timeout_ms=_positive(
            "deliveryTimeoutMs", by_lower.get("deliverytimeoutms"), DEFAULT_DELIVERY_TIMEOUT_MS
        ),
        abort_wait_ms=_or_default(
            positive_int("abortWaitMs", by_lower.get("abortwaitms"), SinkOptionError, zero=True), DEFAULT_ABORT_WAIT_MS
        ),
    )


def _positive(name: str, text: str | None, default: int) -> int:
    return _or_default(positive_int(name, text, SinkOptionError), default)


def _or_default(value: int | None, default: int) -> int:
    return default if value is None else value


@dataclass(frozen=True, slots=True)
class Columns:
    """Where each column the sink writes is in the input (None: absent)."""

    value: int
    key: int | None = None
    topic: int | None = None
    partition: int | None = None
    headers: int | None = None


def check_columns(fields: Sequence[tuple[str, str]], options: SinkOptions) -> Columns:
    """The input's (name, Spark simpleString type) fields against Spark's Kafka sink schema: a missing
    value column, a missing topic (no option, no column) or a column of a type the sink cannot write
    is a SinkOptionError naming the column and the types it may have. Names match without case."""
    where = {name.lower(): (n, name, kind.replace(" ", "").lower()) for n, (name, kind) in enumerate(fields)}
    for column, allowed in _COLUMN_TYPES.items():
        found = where.get(column)
        if found is not None and found[2] not in allowed:
            raise SinkOptionError(
                f"column {found[1]} is {found[2]}; the sink writes it when it is {' or '.join(allowed)}"
            )
    if "value" not in where:
        raise SinkOptionError(
            f"the input has no value column (string or binary); its columns: {[name for name, _ in fields]}"
        )
    if options.topic is None and "topic" not in where:
        raise SinkOptionError("no topic: set the topic option or give the input a topic column (string)")

    def index(column: str) -> int | None:
        found = where.get(column)
        return None if found is None else found[0]

    return Columns(
        value=where["value"][0],
        key=index("key"),
        topic=None if options.topic else index("topic"),
        partition=index("partition"),
        headers=index("headers") if options.include_headers else None,
    )
