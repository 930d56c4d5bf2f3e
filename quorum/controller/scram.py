"""AlterUserScramCredentials decided against the metadata's SCRAM credentials (Kafka's ScramControlManager).

The request's deletions and upsertions are grouped by user first: a user named twice in one request
(two deletions, two upsertions, or one of each, whatever the mechanisms) gets DUPLICATE_RESOURCE
and none of its changes is made. Then each deletion is checked (mechanism known, user name not
empty, the credential exists: RESOURCE_NOT_FOUND otherwise) and gets a
RemoveUserScramCredentialRecord; each upsertion is checked (mechanism known, user not empty,
iterations within the mechanism's 4096..16384: UNACCEPTABLE_CREDENTIAL otherwise) and gets a
UserScramCredentialRecord holding the StoredKey and ServerKey computed from the client's salted
password (the salted password itself is not kept). An unknown mechanism is
UNSUPPORTED_SASL_MECHANISM and an empty name UNACCEPTABLE_CREDENTIAL, with Kafka's messages.
Results come in Kafka's order: deletions, upsertions, then the duplicated users.

Sans-IO: the view is the (pending) image.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from quorum.controller.results import ControllerResult
from quorum.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_TYPES,
    MIN_ITERATIONS,
    ScramCredential,
    credential_of_salted,
)
from quorum.security.scram_records import MECHANISM_NAMES, encode_scram, encode_scram_removal
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS

DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS = 50, 51
DUPLICATE = "A user credential cannot be altered twice in the same request"


class ScramView(Protocol):
    """What AlterUserScramCredentials reads of the metadata: the credentials (`MetadataImage.scram`)."""

    @property
    def scram(self) -> Mapping[tuple[str, str], ScramCredential]: ...


def alter_user_scram_credentials(request: Any, view: ScramView) -> ControllerResult:
    schema = APIS[ALTER_USER_SCRAM_CREDENTIALS].response
    deletions: dict[str, Any] = {}
    upsertions: dict[str, Any] = {}
    duplicated: dict[str, None] = {}  # insertion-ordered set
    for deletion in request.deletions or ():
        if deletion.name not in duplicated:
            if deletions.pop(deletion.name, None) is not None:
                duplicated[deletion.name] = None
            else:
                deletions[deletion.name] = deletion
    for upsertion in request.upsertions or ():
        if upsertion.name not in duplicated:
            if deletions.pop(upsertion.name, None) is not None or upsertions.pop(upsertion.name, None) is not None:
                duplicated[upsertion.name] = None
            else:
                upsertions[upsertion.name] = upsertion
    records: list[bytes] = []
    results = []

    def result(user: str, error: ErrorCode = ErrorCode.NONE, message: str | None = None) -> None:
        results.append(schema.AlterUserScramCredentialsResult(user=user, error_code=int(error), error_message=message))

    for name, deletion in deletions.items():
        mechanism, error = _check(name, deletion.mechanism)
        if error is None and (name, mechanism) not in view.scram:
            error = (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
        if error is not None:
            result(name, *error)
            continue
        records.append(encode_scram_removal(name, mechanism))
        result(name)
    for name, upsertion in upsertions.items():
        mechanism, error = _check(name, upsertion.mechanism)
        if error is None and upsertion.iterations < MIN_ITERATIONS:
            error = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif error is None and upsertion.iterations > MAX_ITERATIONS:
            error = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        if error is not None:
            result(name, *error)
            continue
        credential = credential_of_salted(mechanism, bytes(upsertion.salt or b""),
                                          bytes(upsertion.salted_password or b""), upsertion.iterations)
        records.append(encode_scram(name, mechanism, credential))
        result(name)
    for name in duplicated:
        result(name, ErrorCode.DUPLICATE_RESOURCE, DUPLICATE)
    return ControllerResult(tuple(records), schema(throttle_time_ms=0, results=results))


def _check(name: str, code: int) -> tuple[str, tuple[ErrorCode, str] | None]:
    """The mechanism's name, or the error of an unknown mechanism or an empty user name (in that order, as Kafka)."""
    mechanism = MECHANISM_NAMES.get(code)
    if mechanism is None:
        return "", (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    if not name:
        return mechanism, (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    return mechanism, None


def describe_user_scram_credentials(request: Any, credentials: Mapping[tuple[str, str], ScramCredential]) -> Any:
    """The DescribeUserScramCredentials response over `credentials` (a broker's image's, Kafka's
    ScramImage.describe): every user with a credential when the request names none; a user named
    twice gets DUPLICATE_RESOURCE, one without any credential RESOURCE_NOT_FOUND. Only mechanisms and
    iterations are told, never salts or keys."""
    schema = APIS[DESCRIBE_USER_SCRAM_CREDENTIALS].response
    result_schema = schema.DescribeUserScramCredentialsResult
    by_user: dict[str, list[Any]] = {}
    for (user, mechanism), credential in sorted(credentials.items()):
        by_user.setdefault(user, []).append(result_schema.CredentialInfo(
            mechanism=MECHANISM_TYPES[mechanism], iterations=credential.iterations))
    named = [user.name for user in request.users or ()]
    wanted: dict[str, bool] = {}  # user -> named more than once
    for name in named or by_user:
        wanted[name] = name in wanted
    results = []
    for name, twice in wanted.items():
        if twice:
            results.append(result_schema(user=name, error_code=ErrorCode.DUPLICATE_RESOURCE, credential_infos=[],
                                         error_message=f"Cannot describe SCRAM credentials for the same user twice "
                                                       f"in a single request: {name}"))
        elif name not in by_user:
            results.append(result_schema(user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND, credential_infos=[],
                                         error_message=f"Attempt to describe a user credential that does not "
                                                       f"exist: {name}"))
        else:
            results.append(result_schema(user=name, error_code=ErrorCode.NONE, error_message=None,
                                         credential_infos=by_user[name]))
    return schema(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, results=results)


