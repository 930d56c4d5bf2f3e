"""ACL records in the metadata log: encoding, the fast key path, replay into the image, snapshots."""

from __future__ import annotations

import uuid

import pytest

from quorum.image.image_state import ImageState
from quorum.image.records_state import MetadataRecordsState
from quorum.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType, new_binding
from quorum.security.acl_records import acl_record, encode_acl, remove_acl_record
from quorum.wire import metadata_records as mr

READ_T = new_binding(2, "orders", 3, "User:alice", "*", 3, 3)
WRITE_PREFIX = new_binding(2, "pay", 4, "User:*", "10.0.0.1", 4, 2)


def test_record_round_trip_and_key() -> None:
    acl_id = uuid.uuid4()
    value = encode_acl(acl_id, WRITE_PREFIX)
    assert value[:3] == b"\x01\x12\x00"  # frame 1, type 18, version 0 (Kafka's AccessControlEntryRecord)
    record = mr.decode_metadata_record(value)
    assert (record.resource_type, record.resource_name, record.pattern_type, record.principal, record.host,
            record.operation, record.permission_type) == (2, "pay", 4, "User:*", "10.0.0.1", 4, 2)
    assert mr.metadata_record_key(value) == mr.RecordKey(mr.MetadataRecordType.ACCESS_CONTROL_ENTRY, acl_id)
    removal = mr.encode_metadata_record(remove_acl_record(acl_id))
    assert removal[:3] == b"\x01\x13\x00"
    assert mr.metadata_record_key(removal) == mr.RecordKey(mr.MetadataRecordType.REMOVE_ACCESS_CONTROL_ENTRY,
                                                           acl_id, True)


def _state(*values: bytes) -> ImageState:
    state = ImageState()
    for offset, value in enumerate(values):
        state.apply(offset, value)
    return state


def test_replay_snapshot_and_removal() -> None:
    one, two = uuid.uuid4(), uuid.uuid4()
    state = _state(encode_acl(one, READ_T), encode_acl(two, WRITE_PREFIX))
    assert dict(state.image.acls) == {one: READ_T, two: WRITE_PREFIX}
    snapshot = list(state.snapshot_values())
    assert len(snapshot) == len(state) == 2
    loaded = ImageState()
    loaded.load(snapshot, offset=1)
    assert loaded.image.acls == state.image.acls
    state.apply(2, mr.encode_metadata_record(remove_acl_record(one)))
    state.apply(3, mr.encode_metadata_record(remove_acl_record(uuid.uuid4())))  # unknown id: nothing
    assert dict(state.image.acls) == {two: WRITE_PREFIX}
    assert state.image.acls[two].pattern.pattern_type is PatternType.PREFIXED
    assert state.image.acls[two].entry.permission is AclPermissionType.DENY


def test_records_state_keeps_acls_in_its_snapshots() -> None:
    one, two = uuid.uuid4(), uuid.uuid4()
    state = MetadataRecordsState()
    for offset, value in enumerate([encode_acl(one, READ_T), encode_acl(two, WRITE_PREFIX),
                                    mr.encode_metadata_record(remove_acl_record(one))]):
        state.apply(offset, value)
    assert state.snapshot_values() == [encode_acl(two, WRITE_PREFIX)]


@pytest.mark.parametrize("field, code", [("resource_type", 1), ("pattern_type", 2), ("operation", 99),
                                         ("permission_type", 0), ("resource_type", 0)])
def test_a_record_with_a_code_no_acl_may_have_is_refused(field: str, code: int) -> None:
    record = acl_record(uuid.uuid4(), READ_T)
    setattr(record, field, code)
    state = _state(mr.encode_metadata_record(record))
    assert state.skipped_records == 1 and not state.image.acls


def test_binding_codes() -> None:
    assert READ_T.pattern.resource_type is ResourceType.TOPIC and READ_T.entry.operation is AclOperation.READ
