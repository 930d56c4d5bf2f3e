"""The SDK's own parsers under garbage (issue 19): committed metadata strings, the KIP-232 JSON a user hands
to seek(), and Metadata answers read through client_epochs' broker connection and turned into its values.
Each raises only its documented error (InvalidInternalMetadataError; BrokerError for an answer), never another."""

from __future__ import annotations

import json
import socket
import struct
import time
from contextlib import suppress

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from client_epochs.committed import parse_internal, split
from client_epochs.connection import BrokerConnection, BrokerError
from client_epochs.metadata_client import METADATA, _cluster_metadata
from client_epochs.model import TopicPartition
from quorum.wire.internal_metadata import PREFIX, InternalMetadata, InvalidInternalMetadataError, decode, encode
from quorum.wire.varint import encode_uvarint
from tests.wire.schema_strategies import message_values

TP = TopicPartition("orders", 3)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
"""Any JSON value, as a broken writer or a hand-edited commit could leave one."""
KEYS = st.sampled_from(["version", "topic_epoch", "leader_epoch", "topic_id"]) | st.text(max_size=12)
INTERNAL_JSON = st.one_of(
    st.text(max_size=200),
    st.dictionaries(KEYS, JSON_VALUES, max_size=5).map(json.dumps),
    st.builds(
        lambda epochs, tid: InternalMetadata(*epochs).to_json().replace('"leader', f'"topic_id":{tid},"leader'),
        st.tuples(st.integers(-1, 2**31 - 1), st.integers(-1, 2**31 - 1)),
        st.text(max_size=30).map(json.dumps),
    ),
    st.just("[" * 100_000),  # nesting deeper than the JSON parser's recursion
)


@settings(max_examples=100, deadline=None)
@given(head=INTERNAL_JSON, user=st.text(max_size=40), newline=st.booleans(), nul=st.booleans())
def test_committed_metadata_strings_raise_only_invalid_internal_metadata(head, user, newline, nul):
    text = PREFIX + head + ("\n" if newline else "") + user + ("\x00" if nul else "")
    for parse in (decode, lambda t: split(TP, t)):
        try:
            parsed_user, internal = parse(text)
        except InvalidInternalMetadataError:
            continue
        assert isinstance(internal, InternalMetadata) and isinstance(parsed_user, str)
    try:
        internal = parse_internal(TP, head)
    except InvalidInternalMetadataError:
        return
    assert decode(encode("u", internal)) == ("u", internal)  # whatever parses writes back the same


@settings(max_examples=200, deadline=None)
@given(value=JSON_VALUES | st.binary(max_size=20) | st.integers())
def test_seek_metadata_of_any_type_raises_only_invalid_internal_metadata(value):
    with suppress(InvalidInternalMetadataError):
        parse_internal(TP, value)


def metadata_answer(version: int, body: bytes, correlation_id: int = 1) -> bytes:
    """A Metadata response frame: correlation id, the v1 header's empty tag section when flexible, the body."""
    head = struct.pack(">i", correlation_id) + (encode_uvarint(0) if version >= 9 else b"")
    return struct.pack(">i", len(head) + len(body)) + head + body


def read_answer(version: int, frame: bytes):
    """What client_epochs makes of `frame` as the answer to its Metadata request: the connection's decoder
    (over a real socket pair), then the metadata client's values."""
    ours, theirs = socket.socketpair()
    with theirs:
        theirs.sendall(frame)
        theirs.shutdown(socket.SHUT_WR)
        connection = BrokerConnection("broker.test", 9092, "fuzz")
        connection._sock = ours  # the connection as opened: the answer is already on its way
        request = METADATA.request(
            topics=None,
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        try:
            response = connection.request(METADATA, version, request, time.monotonic() + 10)
        finally:
            connection.close()
    return _cluster_metadata("broker.test:9092", version, response)


VERSIONS = st.integers(1, METADATA.max_version)


def _mutated(body: bytes, data) -> bytes:
    how = data.draw(st.sampled_from(["cut", "flip", "overwrite", "insert", "none"]))
    if not body or how == "none":
        return body
    at = data.draw(st.integers(0, len(body) - 1))
    if how == "cut":
        return body[:at]
    if how == "flip":
        return body[:at] + bytes([body[at] ^ (1 << data.draw(st.integers(0, 7)))]) + body[at + 1 :]
    patch = data.draw(
        st.sampled_from(
            [b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\xff\xff", b"\x80" * 6, b"\xff\xff\xff\xff\x0f", b"\x00"]
        )
    )
    if how == "insert":
        return body[:at] + patch + body[at:]
    return body[:at] + patch + body[at + len(patch) :]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), version=VERSIONS)
def test_metadata_answers_raise_only_broker_errors(data, version):
    """Valid answers mutated (cut, bits flipped, lengths overwritten or inserted) and the answer's frame
    around them: decoded, the SDK's values come out; otherwise a BrokerError (the broker's fault) only."""
    response = data.draw(message_values(METADATA.response, version))
    body = _mutated(bytes(response.encode(version=version)), data)
    frame = metadata_answer(version, body, data.draw(st.sampled_from([1, 1, 1, 2])))
    with suppress(BrokerError):
        read_answer(version, frame)


@settings(max_examples=200, deadline=None)
@given(version=VERSIONS, garbage=st.binary(max_size=300))
def test_random_bytes_as_a_metadata_answer_raise_only_broker_errors(version, garbage):
    for frame in (garbage, struct.pack(">i", len(garbage)) + garbage, metadata_answer(version, garbage)):
        with suppress(BrokerError):
            read_answer(version, frame)
