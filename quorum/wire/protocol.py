"""The API table: which request and response schema each API key uses, and request/response codecs.

Server-side classes are built from the raw Kafka schemas that kafka-python ships (not from
kafka-python's client classes, which rename some fields), plus the project's own schemas for
the KRaft RPCs. MetadataResponse carries the KIP-232 topic_epoch as a tagged field of each topic,
so clients that do not know the tag skip it and this SDK reads it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.schemas import BaseField

from quorum.wire.consumer_group_messages import CONSUMER_GROUP_APIS
from quorum.wire.errors import MalformedRequestError, UnsupportedApiError
from quorum.wire.framing import (
    RequestHeader,
    encode_request_header,
    frame,
    frame_size,
    parse_request_header,
    peek_api,
    response_header,
    skip_tagged_fields,
)
from quorum.wire.kraft_messages import KRAFT_APIS
from quorum.wire.nulls import null_field
from quorum.wire.records_field import decode_records_as_views
from quorum.wire.schema import KAFKA_PYTHON_SCHEMAS, define_message
from quorum.wire.tags import TOPIC_EPOCH_TAG

API_VERSIONS_KEY = 18


def _add_topic_epoch_tag(json: dict[str, Any]) -> dict[str, Any]:
    topics = next(field for field in json["fields"] if field["name"] == "Topics")
    topics["fields"].append({
        "name": "TopicEpoch", "type": "int32", "versions": "9+", "taggedVersions": "9+",
        "tag": TOPIC_EPOCH_TAG, "default": "-1", "ignorable": True,
        "about": "KIP-232: the cluster-wide topic epoch when the topic was created or last changed.",
    })
    return json


SNAPSHOT_COORDINATION_TAG = 10631
"""KIP-631: the tag of a replica's snapshot report in its Raft Fetch, and of the active controller's grant."""


def _add_snapshot_report_tag(json: dict[str, Any]) -> dict[str, Any]:
    json["fields"].append({
        "name": "SnapshotReport", "type": "SnapshotReport", "versions": "12+", "taggedVersions": "12+",
        "tag": SNAPSHOT_COORDINATION_TAG, "default": "null", "nullableVersions": "12+", "ignorable": True,
        "about": "KIP-631: the fetching replica's snapshots, for the active controller that coordinates them.",
        "fields": [
            {"name": "LatestSnapshotEndOffset", "type": "int64", "versions": "12+",
             "about": "The end offset of the replica's latest snapshot, -1 without one."},
            {"name": "BytesSinceSnapshot", "type": "int64", "versions": "12+",
             "about": "Log bytes the replica applied since that snapshot."},
            {"name": "SnapshotDue", "type": "bool", "versions": "12+",
             "about": "The replica's own KIP-630 policy says a snapshot should be taken."},
            {"name": "SnapshotInProgress", "type": "bool", "versions": "12+",
             "about": "The replica is writing a snapshot."},
        ],
    })
    return json


def _add_snapshot_grant_tag(json: dict[str, Any]) -> dict[str, Any]:
    json["fields"].append({
        "name": "SnapshotGranted", "type": "bool", "versions": "12+", "taggedVersions": "12+",
        "tag": SNAPSHOT_COORDINATION_TAG, "default": "false", "ignorable": True,
        "about": "KIP-631: the active controller lets the fetching replica write a snapshot now.",
    })
    return json


# API keys served from kafka-python's bundled schemas, by schema base name.
_KAFKA_SCHEMA_APIS = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit", 9: "OffsetFetch",
    10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat", 13: "LeaveGroup", 14: "SyncGroup",
    15: "DescribeGroups", 16: "ListGroups", 17: "SaslHandshake", 18: "ApiVersions", 19: "CreateTopics",
    20: "DeleteTopics", 21: "DeleteRecords", 22: "InitProducerId", 23: "OffsetForLeaderEpoch",
    29: "DescribeAcls", 30: "CreateAcls", 31: "DeleteAcls", 32: "DescribeConfigs", 33: "AlterConfigs",
    36: "SaslAuthenticate",
    37: "CreatePartitions", 44: "IncrementalAlterConfigs", 45: "AlterPartitionReassignments",
    46: "ListPartitionReassignments", 50: "DescribeUserScramCredentials", 51: "AlterUserScramCredentials",
    55: "DescribeQuorum", 60: "DescribeCluster",
}
_SCHEMA_PATCHES = {"MetadataResponse": _add_topic_epoch_tag, "FetchRequest": _add_snapshot_report_tag,
                   "FetchResponse": _add_snapshot_grant_tag}


@dataclass(frozen=True, slots=True)
class Api:
    """One Kafka API: its schemas and the version range this project encodes and decodes."""

    key: int
    name: str
    request: type[ApiMessage]
    response: type[ApiMessage]
    min_version: int
    max_version: int

    def is_flexible(self, version: int) -> bool:
        return bool(self.request.flexible_version_q(version))

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


def _api_from_classes(key: int, request: type[ApiMessage], response: type[ApiMessage]) -> Api:
    low, high = BaseField.parse_versions(request.json["validVersions"])
    return Api(key, request.json["name"].removesuffix("Request"), request, response, low, high)


def _kafka_schema_api(key: int, base: str) -> Api:
    request = define_message(f"{base}Request", KAFKA_PYTHON_SCHEMAS, _SCHEMA_PATCHES.get(f"{base}Request"))
    response = define_message(f"{base}Response", KAFKA_PYTHON_SCHEMAS, _SCHEMA_PATCHES.get(f"{base}Response"))
    if key == 0:  # Produce: the batch as a view of the frame, not a copy
        decode_records_as_views(request._struct)
    return _api_from_classes(key, request, response)


class ApiTable(Mapping[int, Api]):
    """API key -> Api, each built from its JSON schemas the first time it is looked up.

    Why lazily: building all forty-odd request and response classes was most of the cost of importing
    this module (~0.15 CPU-s), which every process pays at start (each node, tool and client, and a
    Spark streaming query's planning process per query) while a client uses three or four APIs. The
    keys, their order and the classes are those of building them all; iterating builds them all.
    """

    def __init__(self) -> None:
        self._made: dict[int, Api] = {}
        self._builders: dict[int, Callable[[], Api]] = {
            key: partial(_kafka_schema_api, key, base) for key, base in _KAFKA_SCHEMA_APIS.items()
        }
        for key, (request, response) in (KRAFT_APIS | CONSUMER_GROUP_APIS).items():
            self._builders[key] = partial(_api_from_classes, key, request, response)
        self._builders = dict(sorted(self._builders.items()))
        self._lock = threading.Lock()

    def __getitem__(self, key: int) -> Api:
        api = self._made.get(key)
        if api is not None:
            return api
        build = self._builders[key]  # KeyError: not an API this project knows
        with self._lock:  # one class per schema even when two threads ask first
            api = self._made.get(key)
            if api is None:
                api = self._made[key] = build()
        return api

    def __contains__(self, key: object) -> bool:
        return key in self._builders

    def __iter__(self) -> Iterator[int]:
        return iter(self._builders)

    def __len__(self) -> int:
        return len(self._builders)


class _ApisByName(Mapping[str, Api]):
    """APIS by name ("Metadata", "Fetch", ...): the whole table is built on first use."""

    def __init__(self, table: ApiTable) -> None:
        self._table = table
        self._by_name: dict[str, Api] | None = None

    def _names(self) -> dict[str, Api]:
        if self._by_name is None:
            self._by_name = {api.name: api for api in self._table.values()}
        return self._by_name

    def __getitem__(self, name: str) -> Api:
        return self._names()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._table)


APIS: ApiTable = ApiTable()
APIS_BY_NAME: Mapping[str, Api] = _ApisByName(APIS)


@dataclass(slots=True)
class Request:
    """A decoded request. `body` is None only for an ApiVersions request of a version we do not know."""

    header: RequestHeader
    api: Api
    body: Any
    body_offset: int = 0

    @property
    def version(self) -> int:
        return self.header.api_version


def decode_request(payload: bytes | memoryview, served: Mapping[int, Api] = APIS) -> Request:
    """Header and body of one request frame (without its size prefix).

    Trailing bytes after the body are tolerated, as Kafka does: librdkafka pads an "all topics"
    Metadata request. An ApiVersions request of a version newer than ours is still answered
    (with UNSUPPORTED_VERSION and our ranges), so its body is not decoded.
    """
    api_key, api_version, correlation_id = peek_api(payload)
    api = served.get(api_key)
    if api is None:
        raise UnsupportedApiError(f"API key {api_key} (correlation id {correlation_id}) is not served here")
    if not api.supports(api_version):
        if api_key == API_VERSIONS_KEY and api_version > api.max_version:
            header, _ = parse_request_header(payload, flexible=True)
            return Request(header, api, None)
        raise UnsupportedApiError(
            f"{api.name} v{api_version} is outside the served range v{api.min_version}-v{api.max_version}")
    header, pos = parse_request_header(payload, api.is_flexible(api_version))
    body = decode_body(api.request, payload, pos, api_version)
    return Request(header, api, body, pos)


def _body_decoder(schema: type[ApiMessage], version: int) -> Callable[[memoryview, int], tuple[Any, int]]:
    """kafka-python's compiled decoder of `schema` at `version` (compiled at its first use, then cached)."""
    flexible = schema.flexible_version_q(version)
    return schema._struct.compiled_decode_from(version, compact=flexible, tagged=flexible, data_class=schema[None])


def _body_encoder(schema: type[ApiMessage], version: int) -> Callable[[Any, Any], None]:
    """kafka-python's compiled encoder of `schema` at `version`, as `ApiMessage.encode` asks for it."""
    flexible = schema.flexible_version_q(version)
    return schema._struct.compiled_encode_into(version, compact=flexible, tagged=flexible)


def decode_body(schema: type[ApiMessage], payload: bytes | memoryview, pos: int, version: int) -> Any:
    """One message body at `pos`; any failure of the schema engine becomes a MalformedRequestError."""
    view = memoryview(payload)[pos:]
    try:
        body, end = _body_decoder(schema, version)(view, 0)
    except Exception as exc:  # the engine raises struct.error, IndexError, UnicodeDecodeError, ...: no common base
        reason = repr(exc)  # cut: a UnicodeDecodeError holds the whole string, and bad input fills a log line each
        reason = reason if len(reason) <= 300 else f"{reason[:300]}... ({len(reason)} characters)"
        raise MalformedRequestError(f"{schema.json['name']} v{version} body does not parse: {reason}") from None
    if end > len(view):
        raise MalformedRequestError(
            f"{schema.json['name']} v{version} body needs {end} bytes but the frame holds {len(view)}")
    null = null_field(schema._struct, body, version)
    if null is not None:
        raise MalformedRequestError(f"{schema.json['name']} v{version}: non-nullable field {null} is null")
    # The compiled decoder skips ApiMessage.__init__: give the instance the state encode() expects.
    body._version = version
    body._header = body._min_version = body._max_version = None
    return body


def encode_response(request: Request, response: Any, version: int | None = None) -> bytes:
    """A framed response to `request`: header v0/v1 by the API's flexibility (v0 always for ApiVersions).

    `response` is a message object, or its body already encoded (bytes) by a handler that caches.
    """
    version = request.version if version is None else version
    body = response if isinstance(response, bytes) else response.encode(version=version)
    return response_head(request, len(body), version) + body


def response_head(request: Request, body_size: int, version: int) -> bytes:
    """The frame size and response header of a `body_size`-byte answer to `request` at `version`
    (for a body written in pieces: `quorum.wire.spliced`)."""
    flexible = request.api.is_flexible(version) and request.api.key != API_VERSIONS_KEY
    header = response_header(request.header.correlation_id, flexible)
    return frame_size(len(header) + body_size) + header


def compile_codecs(versions: Iterable[tuple[Api, int]]) -> int:
    """Compile the encoders and decoders of these APIs' requests and responses at these versions
    now; how many. kafka-python compiles each (message, version) codec at its first use, 2-12 ms of
    CPU with the event loop stopped: a node restarted since the last failover compiled its Vote,
    BeginQuorumEpoch and EndQuorumEpoch codecs in the middle of the next one (issue 37's traced
    graceful failovers). Compiled at start, they are in the heap the node then freezes."""
    compiled = 0
    for api, version in versions:
        for schema in (api.request, api.response):
            _body_encoder(schema, version)
            _body_decoder(schema, version)
            compiled += 2
    return compiled


def encode_request(api: Api, header: RequestHeader, body: Any) -> bytes:
    """A framed request, for the node's own RPCs to its peers and for tests."""
    body_bytes = body.encode(version=header.api_version)
    return frame(encode_request_header(header, api.is_flexible(header.api_version)) + body_bytes)


def decode_response(api: Api, version: int, payload: bytes | memoryview) -> tuple[int, Any]:
    """Correlation id and body of a response frame (without its size prefix)."""
    flexible = api.is_flexible(version) and api.key != API_VERSIONS_KEY
    if len(payload) < 4:
        raise MalformedRequestError("response shorter than its correlation id")
    correlation_id = int.from_bytes(payload[:4], "big", signed=True)
    pos = 4
    if flexible:
        pos = skip_tagged_fields(payload, pos)
    return correlation_id, decode_body(api.response, payload, pos, version)
