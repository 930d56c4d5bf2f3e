"""SCRAM credentials in the metadata log: the records, replay into the image and snapshots, the
controller's AlterUserScramCredentials rules (Kafka's ScramControlManager) and DescribeUserScramCredentials."""

from __future__ import annotations

import pytest

from quorum.controller.scram import alter_user_scram_credentials, describe_user_scram_credentials
from quorum.image.image import MetadataImage
from quorum.image.image_state import ImageState
from quorum.image.records_state import MetadataRecordsState
from quorum.security.scram import ScramClient, ScramServer, make_credential, salted_password
from quorum.security.scram_records import encode_scram, encode_scram_removal, scram_record
from quorum.server.controller_service import pending_view
from quorum.wire import metadata_records as mr
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS
from tests.security.test_acl_records import _state  # an ImageState that applied the values at offsets 0, 1, ...

ALTER, DESCRIBE = APIS[51].request, APIS[50].request
SALT = b"0123456789abcdef"
SHA256, SHA512 = 1, 2


def test_record_round_trip_and_key() -> None:
    credential = make_credential("SCRAM-SHA-512", "pw", 8192, SALT)
    value = encode_scram("alice", "SCRAM-SHA-512", credential)
    assert value[:3] == b"\x01\x0b\x00"  # frame 1, type 11, version 0 (Kafka's UserScramCredentialRecord)
    record = mr.decode_metadata_record(value)
    assert (record.name, record.mechanism, record.salt, record.stored_key, record.server_key, record.iterations) == (
        "alice", SHA512, SALT, credential.stored_key, credential.server_key, 8192)
    assert mr.metadata_record_key(value) == mr.RecordKey(mr.MetadataRecordType.USER_SCRAM_CREDENTIAL, ("alice", 2))
    removal = encode_scram_removal("alice", "SCRAM-SHA-256")
    assert removal[:3] == b"\x01\x16\x00"  # type 22
    assert mr.metadata_record_key(removal) == mr.RecordKey(mr.MetadataRecordType.REMOVE_USER_SCRAM_CREDENTIAL,
                                                           ("alice", 1), True)


def test_replay_snapshot_and_removal() -> None:
    a512 = make_credential("SCRAM-SHA-512", "a", salt=SALT)
    a256 = make_credential("SCRAM-SHA-256", "a", salt=SALT)
    b512 = make_credential("SCRAM-SHA-512", "b", salt=SALT)
    state = _state(encode_scram("alice", "SCRAM-SHA-512", a512), encode_scram("alice", "SCRAM-SHA-256", a256),
                   encode_scram("bob", "SCRAM-SHA-512", b512))
    assert dict(state.image.scram) == {("alice", "SCRAM-SHA-512"): a512, ("alice", "SCRAM-SHA-256"): a256,
                                       ("bob", "SCRAM-SHA-512"): b512}
    snapshot = list(state.snapshot_values())
    assert len(snapshot) == len(state) == 3
    loaded = ImageState()
    loaded.load(snapshot, offset=2)
    assert loaded.image.scram == state.image.scram
    changed = make_credential("SCRAM-SHA-512", "new", salt=SALT)
    state.apply(3, encode_scram("bob", "SCRAM-SHA-512", changed))
    state.apply(4, encode_scram_removal("alice", "SCRAM-SHA-512"))
    state.apply(5, encode_scram_removal("nobody", "SCRAM-SHA-512"))  # unknown: nothing
    assert dict(state.image.scram) == {("alice", "SCRAM-SHA-256"): a256, ("bob", "SCRAM-SHA-512"): changed}


def test_records_state_keeps_credentials_in_its_snapshots() -> None:
    one = encode_scram("alice", "SCRAM-SHA-512", make_credential("SCRAM-SHA-512", "x", salt=SALT))
    two = encode_scram("alice", "SCRAM-SHA-512", make_credential("SCRAM-SHA-512", "y", salt=SALT))
    keep = encode_scram("bob", "SCRAM-SHA-256", make_credential("SCRAM-SHA-256", "z", salt=SALT))
    state = MetadataRecordsState()
    for offset, value in enumerate([one, keep, two, encode_scram_removal("alice", "SCRAM-SHA-512")]):
        state.apply(offset, value)
    assert state.snapshot_values() == [keep]


@pytest.mark.parametrize("field, value", [("mechanism", 0), ("mechanism", 3), ("name", "")])
def test_a_record_with_an_unknown_mechanism_or_no_name_is_refused(field: str, value: object) -> None:
    record = scram_record("alice", "SCRAM-SHA-512", make_credential("SCRAM-SHA-512", "x", salt=SALT))
    setattr(record, field, value)
    state = _state(mr.encode_metadata_record(record))
    assert state.skipped_records == 1 and not state.image.scram


def _upsert(name: str, mechanism: int = SHA512, iterations: int = 4096, password: str = "pw") -> object:
    salted = salted_password("SCRAM-SHA-512" if mechanism == SHA512 else "SCRAM-SHA-256", password, SALT,
                             max(iterations, 1)) if mechanism in (SHA256, SHA512) else b"x"
    return ALTER.ScramCredentialUpsertion(name=name, mechanism=mechanism, iterations=iterations, salt=SALT,
                                          salted_password=salted)


def _delete(name: str, mechanism: int = SHA512) -> object:
    return ALTER.ScramCredentialDeletion(name=name, mechanism=mechanism)


def _alter(view: MetadataImage, deletions=(), upsertions=()):
    result = alter_user_scram_credentials(ALTER(deletions=list(deletions), upsertions=list(upsertions)), view)
    return result, [(r.user, r.error_code, r.error_message) for r in result.response.results]


def test_upsert_stores_keys_a_client_authenticates_with() -> None:
    view = MetadataImage("c", 1)
    result, answers = _alter(view, upsertions=[_upsert("alice", password="secret", iterations=8192)])
    assert answers == [("alice", 0, None)] and len(result.records) == 1
    view = pending_view(view, result.records, 0)
    credential = view.scram[("alice", "SCRAM-SHA-512")]
    assert credential.iterations == 8192 and credential.salt == SALT
    assert b"secret" not in result.records[0]
    client = ScramClient("SCRAM-SHA-512", "alice", "secret")
    server = ScramServer("SCRAM-SHA-512", lambda user: view.scram.get((user, "SCRAM-SHA-512")))
    client.verify(server.final(client.final(server.first(client.first()))))


def test_alter_refusals_have_kafkas_codes() -> None:
    view = pending_view(MetadataImage("c", 1), _alter(MetadataImage("c", 1), upsertions=[_upsert("bob")])[0].records, 0)
    result, answers = _alter(view, deletions=[_delete("ghost"), _delete("bob", SHA256), _delete("x", 7),
                                              _delete("twice"), _delete("twice")],
                             upsertions=[_upsert("few", iterations=4095), _upsert("many", iterations=16385),
                                         _upsert("", SHA256), _upsert("odd", 9), _upsert("both"),
                                         _upsert("both", SHA256), _upsert("bob", iterations=16384)])
    duplicate = (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
    assert answers == [  # Kafka's order: deletions, upsertions, then the users named twice
        ("ghost", ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"),
        ("x", ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        ("few", ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
        ("many", ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
        ("", ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
        ("odd", ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        ("twice", *duplicate), ("both", *duplicate), ("bob", *duplicate),
    ]
    assert result.records == ()
    result, answers = _alter(view, deletions=[_delete("bob")])
    assert answers == [("bob", 0, None)]
    assert pending_view(view, result.records, 1).scram == {}


def test_describe_lists_mechanisms_and_iterations_only() -> None:
    view = MetadataImage("c", 1)
    result, _ = _alter(view, upsertions=[_upsert("alice", iterations=8192), _upsert("bob", SHA256)])
    view = pending_view(view, result.records, 0)
    everyone = describe_user_scram_credentials(DESCRIBE(users=None), view.scram)
    assert [(r.user, r.error_code, [(c.mechanism, c.iterations) for c in r.credential_infos])
            for r in everyone.results] == [("alice", 0, [(SHA512, 8192)]), ("bob", 0, [(SHA256, 4096)])]
    named = describe_user_scram_credentials(DESCRIBE(users=[DESCRIBE.UserName(name=n) for n in
                                                            ("bob", "ghost", "alice", "alice")]), view.scram)
    assert [(r.user, r.error_code) for r in named.results] == [
        ("bob", 0), ("ghost", ErrorCode.RESOURCE_NOT_FOUND), ("alice", ErrorCode.DUPLICATE_RESOURCE)]
