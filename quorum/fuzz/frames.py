"""Structure-aware garbage: request frames with a valid size and header, every API and version a node
serves, and bodies mutated the ways real parsers break (sans-IO: a seeded generator, no sockets).

A frame starts as a random but valid request (every field of its version filled, small arrays,
Kafka's edge values for integers, record batches in Produce), then one mutation is applied: cut
short, an array count or length overwritten with a huge or negative one, a varint that never ends,
the body of the other flexibility under the header's version, unknown tagged fields, flipped bytes,
a record batch with a bad CRC or header, a bad header; or no mutation; or plain random bytes.

Each frame carries what the node must do with it: answer it or close the connection, never neither.
Requests that may legitimately wait or stay unanswered (the APIs with `*timeout*`/`*wait*` fields, and
Produce, whose acks=0 is answered by silence) are decoded here with the node's own codec against the
ranges it advertised: the wait fields of a valid body are kept short, and a frame whose decoded body
would still wait longer than `MAX_WAIT_MS` is drawn again, so that no legitimate wait reads as a hang.
Valid bodies are drawn from a small pool per API version, refilled now and then, because encoding a
random body costs more than sending it.
"""

from __future__ import annotations

import random
import struct
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka.protocol.schemas import BaseField, StructField

from quorum.wire.errors import WireError
from quorum.wire.framing import RequestHeader, encode_request_header
from quorum.wire.protocol import APIS, Api, decode_request
from quorum.wire.records import Record, build_batch
from quorum.wire.varint import encode_uvarint

ANSWER_OR_CLOSE = "answer-or-close"
"""The node must answer the frame, or close the connection (with a logged reason)."""
SILENT = "silent"
"""An acks=0 Produce: no answer; the connection stays usable or is closed (Kafka closes it on an error)."""

RANDOM_BYTES = "random-bytes"
KINDS = ("valid", "truncated", "oversized-count", "negative-length", "bad-varint", "flex-confusion",
         "unknown-tags", "byte-flip", "bad-records", "bad-header", RANDOM_BYTES)
"""Every way a frame is made; `bad-records` applies to Produce and falls back to `byte-flip` elsewhere."""

MAX_WAIT_MS = 500
"""The longest a valid frame's own timeout fields may ask the node to wait."""

_INT_RANGES = {"int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1), "uint16": (0, 2**16 - 1),
               "int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_EDGE_INTS = (0, 1, -1, 2, 3, 127, 128, 255, 256, 32767, -32768, 65535, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63))
_SMALL_INTS = tuple(range(-1, 11))
_WAITS = (-1, 0, 1, 100, MAX_WAIT_MS)
# No "__consumer_offsets": deleting it is an admin's right (Kafka checks only ACLs), and it takes the probe's group.
_STRINGS = ("", "a", "fuzz", "-", ".", "..", "__cluster_metadata", "x" * 249, "x" * 300,
            "é", "\x00", "topic with spaces", "a" * 10_000)
_TOPIC_LETTERS = "abcdefghijklmnopqrstuvwxyz0123456789._-"
_MAX_ITEMS = 3
_POOL = 8
"""Valid bodies kept per API version; one in `_REFRESH` draws makes a new one."""
_REFRESH = 8
_WAITING_APIS = frozenset(key for key, api in APIS.items()
                          if any("timeout" in name or "wait" in name for name in api.request._struct.fields))


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame to send: what it claims to be, how it was made, its bytes (size prefix included),
    and what the node must do with it."""

    api: str
    kind: str
    data: bytes
    expect: str


def served_apis(ranges: Mapping[int, tuple[int, int]]) -> dict[int, Api]:
    """The codec table cut to what a node advertised in ApiVersions: key -> (min, max) version."""
    served = {}
    for key, (low, high) in sorted(ranges.items()):
        api = APIS.get(key)
        if api is None:
            continue
        low, high = max(low, api.min_version), min(high, api.max_version)
        if low <= high:
            served[key] = Api(api.key, api.name, api.request, api.response, low, high)
    return served


class FrameFactory:
    """Frames for one node, from one seed: the same seed and ranges give the same frames."""

    def __init__(self, served: Mapping[int, Api], seed: int, avoid_names: frozenset[str] = frozenset()) -> None:
        if not served:
            raise ValueError("the node serves no API to fuzz (empty ApiVersions ranges)")
        self._served = dict(served)
        self._apis = list(self._served.values())
        self._rng = random.Random(seed)
        self._avoid = avoid_names
        self._correlation = 0
        self._pool: dict[tuple[int, int], list[bytes]] = {}

    def next(self) -> Frame:
        """The next frame; frames whose decoded body would wait too long are drawn again."""
        while True:
            frame = self._draw()
            if frame is not None:
                return frame

    def _draw(self) -> Frame | None:
        rng = self._rng
        kind = rng.choice(KINDS)
        if kind == RANDOM_BYTES:
            data = rng.randbytes(rng.randrange(0, 300))
            if len(data) >= 4 and rng.random() < 0.5:  # a plausible size more often than not
                data = struct.pack(">i", len(data) - 4) + data[4:]
            return Frame("random", kind, data, ANSWER_OR_CLOSE)
        api = rng.choice(self._apis)
        version = rng.randint(api.min_version, api.max_version)
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        header = RequestHeader(api.key, version, self._correlation, self._client_id())
        head = encode_request_header(header, api.is_flexible(version))
        body = self._pooled_body(api, version)
        mutate = _MUTATIONS.get(kind)
        if mutate is not None:
            head, body = mutate(self, api, version, head, body)
        payload = head + body
        expect = self._expectation(payload)
        if expect is None:
            return None
        return Frame(f"{api.name} v{version}", kind, struct.pack(">i", len(payload)) + payload, expect)

    def _expectation(self, payload: bytes) -> str | None:
        """What the node must do; None when the frame would make it wait too long and is to be drawn again."""
        if len(payload) < 2 or struct.unpack_from(">h", payload)[0] not in _WAITING_APIS:
            return ANSWER_OR_CLOSE
        try:
            request = decode_request(payload, self._served)
        except WireError:
            return ANSWER_OR_CLOSE
        body = request.body
        if body is None:
            return ANSWER_OR_CLOSE
        for name in type(body)._struct.fields:
            value = getattr(body, name, None)
            if ("timeout" in name or "wait" in name) and isinstance(value, int) and value > MAX_WAIT_MS:
                return None
        if request.api.name == "Produce" and body.acks == 0:
            return SILENT
        return ANSWER_OR_CLOSE

    # -- valid bodies ------------------------------------------------------------------------

    def _client_id(self) -> str | None:
        return self._rng.choice(("fuzz", None, "", "é" * 3, "x" * 300))

    def _pooled_body(self, api: Api, version: int) -> bytes:
        pool = self._pool.setdefault((api.key, version), [])
        if len(pool) < _POOL:
            pool.append(self._body(api, version))
            return pool[-1]
        if self._rng.randrange(_REFRESH) == 0:
            pool[self._rng.randrange(_POOL)] = self._body(api, version)
        return self._rng.choice(pool)

    def _body(self, api: Api, version: int) -> bytes:
        schema = api.request
        try:
            values = self._struct_values(schema._struct, version)
            return bytes(schema(version=version, **values).encode(version=version))
        except Exception:  # a drawn value the engine will not encode: the defaults always do
            return bytes(schema(version=version).encode(version=version))

    def _struct_values(self, struct_field: StructField, version: int) -> dict[str, Any]:
        return {field.name: self._field_value(field, version)
                for field in struct_field.fields.values() if field.for_version_q(version)}

    def _field_value(self, field: BaseField, version: int) -> Any:
        rng = self._rng
        if field.nullable_for_version_q(version) and rng.random() < 0.1:
            return None
        if field.is_struct_array():
            return [field.array_of.data_class(**self._struct_values(field.array_of, version))
                    for _ in range(rng.randint(0, _MAX_ITEMS))]
        if field.is_struct():
            if field.tagged_field_q(version) and rng.random() < 0.5:
                return None
            return field.data_class(**self._struct_values(field, version))
        if field.is_array():
            return [self._simple(field.array_of.type_str, field.name) for _ in range(rng.randint(0, _MAX_ITEMS))]
        return self._simple(field.type_str, field.name)

    def _simple(self, type_str: str, name: str) -> Any:
        rng = self._rng
        if type_str in _INT_RANGES:
            low, high = _INT_RANGES[type_str]
            if "timeout" in name or "wait" in name:
                return rng.choice(_WAITS)
            roll = rng.random()
            value = rng.choice(_SMALL_INTS) if roll < 0.6 else rng.choice(_EDGE_INTS) if roll < 0.85 \
                else rng.randint(low, high)
            return value if low <= value <= high else rng.randint(low, high)
        if type_str == "bool":
            return rng.random() < 0.5
        if type_str == "float64":
            return rng.choice((0.0, -1.0, 1e308, float("inf"), rng.random()))
        if type_str == "string":
            return self._string()
        if type_str == "bytes":
            return rng.randbytes(rng.randrange(0, 40))
        if type_str == "records":
            return self._records()
        if type_str == "uuid":
            return rng.choice((None, uuid.UUID(int=rng.getrandbits(128))))
        if type_str == "bitfield":
            return {rng.randrange(0, 31) for _ in range(rng.randint(0, 3))}
        raise ValueError(f"no random value for schema type {type_str!r}")

    def _string(self) -> str:
        rng = self._rng
        roll = rng.random()
        if roll < 0.78:
            return rng.choice(_STRINGS)
        if roll < 0.8:  # rarely a legal topic name: valid CreateTopics stay few, so the node's memory means something
            text = "".join(rng.choice(_TOPIC_LETTERS) for _ in range(rng.randint(1, 12)))
        else:
            text = "".join(chr(rng.choice((rng.randrange(32, 127), rng.randrange(0xA0, 0xD7FF))))
                           for _ in range(rng.randint(1, 12)))
        return "fuzz" + text if text in self._avoid else text

    def _records(self) -> bytes | None:
        rng = self._rng
        roll = rng.random()
        if roll < 0.1:
            return None
        if roll < 0.2:
            return rng.randbytes(rng.randrange(0, 80))
        records = [Record(offset=i, timestamp=rng.choice((0, -1, 1_700_000_000_000)),
                          key=rng.choice((None, b"k")), value=rng.randbytes(rng.randrange(0, 30)),
                          headers=[("h", b"v")] if rng.random() < 0.2 else [])
                   for i in range(rng.randint(1, 3))]
        return build_batch(records, compression=rng.choice((0, 0, 0, 1, 2, 3, 4)))

    # -- mutations ---------------------------------------------------------------------------

    def _truncated(self, api: Api, version: int, head: bytes, body: bytes) -> tuple[bytes, bytes]:
        return head, body[:self._rng.randrange(0, len(body))] if body else body

    def _overwrite(self, body: bytes, patch: bytes) -> bytes:
        if not body:
            return patch
        at = self._rng.randrange(0, len(body))
        return body[:at] + patch + body[at + len(patch):]

    def _oversized_count(self, api: Api, version: int, head: bytes, body: bytes) -> tuple[bytes, bytes]:
        patch = self._rng.choice((struct.pack(">i", 2**31 - 1), struct.pack(">i", 0x10000000),
                                  struct.pack(">i", 65536), encode_uvarint(2**31 - 1), encode_uvarint(10**9),
                                  struct.pack(">h", 32767)))
        return head, self._overwrite(body, patch)

    def _negative_length(self, api: Api, version: int, head: bytes, body: bytes) -> tuple[bytes, bytes]:
        patch = self._rng.choice((struct.pack(">i", -2), struct.pack(">i", -(2**31)), struct.pack(">h", -2),
                                  struct.pack(">h", -32768), struct.pack(">i", -1), struct.pack(">h", -1)))
        return head, self._overwrite(body, patch)

    def _bad_varint(self, api: Api, version: int, head: bytes, body: bytes) -> tuple[bytes, bytes]:
        rng = self._rng
        patch = rng.choice((b"\xff" * 6, b"\x80" * 5 + b"\x10", b"\xff\xff\xff\xff\x0f", b"\x80" * 10))
        if rng.random() < 0.5:
            return head, self._overwrite(body, patch)
        at = rng.randrange(0, len(body) + 1)
        return head, body[:at] + patch + body[at:]

    def _flex_confusion(self, api: Api, version: int, head: bytes, body: bytes) -> tuple[bytes, bytes]:
        """The body (or header) of the other flexibility under this version's header."""
        rng = self._rng
        other = [v for v in range(api.request.min_version, api.request.max_version + 1)
                 if api.is_flexible(v) != api.is_flexible(version)]
        header = RequestHeader(api.key, version, self._correlation, self._client_id())
        if other and rng.random() < 0.7:
            return head, self._body(api, rng.choice(other))
        return encode_request_header(header, not api.is_flexible(version)), body

    def _unknown_tags(self, api: Api, version: int, head: bytes, body: bytes) -> tuple[bytes, bytes]:
        """Tagged fields the schema does not know (or known tags holding garbage), in the body's or header's
        tag section; a non-flexible version gets them appended, which Kafka reads as trailing bytes."""
        rng = self._rng
        count = rng.choice((1, 2, 5, 50))
        tags = b"".join(encode_uvarint(rng.choice((0, 1, 2, 10631, 4096, 2**31 - 1, rng.randrange(0, 2**20))))
                        + _sized(rng.randbytes(rng.randrange(0, 20)), rng) for _ in range(count))
        section = encode_uvarint(count) + tags
        if api.is_flexible(version) and rng.random() < 0.3:
            return head[:-1] + section, body  # the header's tag section is its last byte
        if body.endswith(b"\x00"):
            return head, body[:-1] + section
        return head, body + section

    def _byte_flip(self, api: Api, version: int, head: bytes, body: bytes) -> tuple[bytes, bytes]:
        data = bytearray(body)
        for _ in range(self._rng.randint(1, 4)):
            if data:
                data[self._rng.randrange(len(data))] ^= 1 << self._rng.randrange(8)
        return head, bytes(data)

    def _bad_records(self, api: Api, version: int, head: bytes, body: bytes) -> tuple[bytes, bytes]:
        """A Produce whose record batch is damaged in one of the ways a broker must check."""
        if api.name != "Produce":
            return self._byte_flip(api, version, head, body)
        rng = self._rng
        batch = bytearray(build_batch([Record(offset=i, timestamp=0, value=b"v" * i) for i in range(3)],
                                      compression=rng.choice((0, 1, 2, 3, 4))))
        damage = rng.choice(("crc", "magic", "length", "count", "codec", "body", "trailing", "short"))
        if damage == "crc":
            batch[17] ^= 0xFF
        elif damage == "magic":
            batch[16] = rng.choice((0, 1, 3, 255))
        elif damage == "length":
            batch[8:12] = struct.pack(">i", rng.choice((0, 1, 48, 2**31 - 1, -1)))
        elif damage == "count":
            batch[57:61] = struct.pack(">i", rng.choice((0, -1, 2**31 - 1, 4, 1000)))
        elif damage == "codec":
            batch[22] = (batch[22] & ~7) | rng.choice((5, 6, 7))
        elif damage == "body":
            for _ in range(rng.randint(1, 4)):
                batch[rng.randrange(61, len(batch))] ^= 1 << rng.randrange(8)
        elif damage == "trailing":
            batch += rng.randbytes(rng.randint(1, 20))
        else:
            batch = batch[:rng.randrange(0, len(batch))]
        if damage not in ("crc", "magic", "length", "short"):
            _fix_crc(batch)  # the CRC holds, so the damage behind it is what the broker must find
        values = {"transactional_id": None, "acks": rng.choice((-1, 1)), "timeout_ms": MAX_WAIT_MS,
                  "topic_data": [self._produce_topic(api, version, bytes(batch))]}
        schema = api.request
        return head, bytes(schema(version=version, **values).encode(version=version))

    def _produce_topic(self, api: Api, version: int, batch: bytes) -> Any:
        topic_field = api.request._struct.fields["topic_data"].array_of
        partition_field = topic_field.fields["partition_data"].array_of
        partition = partition_field.data_class(index=self._rng.choice((0, 1, -1)), records=batch)
        return topic_field.data_class(name=self._string(), topic_id=uuid.UUID(int=self._rng.getrandbits(128)),
                                      partition_data=[partition])

    def _bad_header(self, api: Api, version: int, head: bytes, body: bytes) -> tuple[bytes, bytes]:
        """An API key or version nobody serves, or a client id length that lies."""
        rng = self._rng
        data = bytearray(head)
        choice = rng.randrange(4)
        if choice == 0:
            data[0:2] = struct.pack(">h", rng.choice((-1, 99, 1000, 32767, -32768, 7)))
        elif choice == 1:
            data[2:4] = struct.pack(">h", rng.choice((-1, api.max_version + 1, 32767, -32768)))
        elif choice == 2:
            # a length past the frame's end (at most int16's top: bodies of 10,000-character strings pass it)
            data[8:10] = struct.pack(">h", rng.choice((-2, -32768, 32767, min(len(head) + len(body), 32767))))
        else:
            data = data[:rng.randrange(0, len(data))]
            body = b""
        return bytes(data), body


_MUTATIONS: dict[str, Callable[[FrameFactory, Api, int, bytes, bytes], tuple[bytes, bytes]]] = {
    "truncated": FrameFactory._truncated,
    "oversized-count": FrameFactory._oversized_count,
    "negative-length": FrameFactory._negative_length,
    "bad-varint": FrameFactory._bad_varint,
    "flex-confusion": FrameFactory._flex_confusion,
    "unknown-tags": FrameFactory._unknown_tags,
    "byte-flip": FrameFactory._byte_flip,
    "bad-records": FrameFactory._bad_records,
    "bad-header": FrameFactory._bad_header,
}


def _sized(data: bytes, rng: random.Random) -> bytes:
    """A tagged field's size and data; sometimes a size that lies."""
    size = len(data) if rng.random() < 0.8 else rng.choice((len(data) + 1, 2**31 - 1, 10**6))
    return encode_uvarint(size) + data


def _fix_crc(batch: bytearray) -> None:
    """Recompute a v2 batch's CRC-32C (attributes to the end) when it is long enough to hold one."""
    from quorum.wire.records import crc32c

    if len(batch) >= 21:
        batch[17:21] = struct.pack(">I", crc32c(bytes(batch[21:])))
