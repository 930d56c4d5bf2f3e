"""One committed metadata string split into the user's part and the internal metadata, for the wrappers.

The split itself is quorum.wire.internal_metadata's; this adds what a consumer needs around it:
the partition named in the error, and librdkafka's trailing NUL dropped (confluent-kafka commits
the metadata string with its C terminator, so other clients read it back with a "\\x00" appended).
"""

from __future__ import annotations

from client_epochs.model import TopicPartition
from quorum.wire.internal_metadata import InternalMetadata, InvalidInternalMetadataError, decode, encode

__all__ = ["encode", "parse_internal", "split"]


def split(tp: TopicPartition, metadata: str | None) -> tuple[str, InternalMetadata | None]:
    """(user metadata, internal metadata or None); InvalidInternalMetadataError names `tp` and the text."""
    try:
        user, internal = decode(metadata)
    except InvalidInternalMetadataError as exc:
        raise InvalidInternalMetadataError(f"committed offset of {tp}: {exc} (metadata {metadata!r})") from None
    return user.removesuffix("\x00"), internal


def parse_internal(tp: TopicPartition, text: object) -> InternalMetadata:
    """The KIP's JSON given to seek(); InvalidInternalMetadataError names `tp` and the text for anything else."""
    if not isinstance(text, str):
        raise InvalidInternalMetadataError(f"internal metadata for {tp} is a {type(text).__name__}, "
                                           f"not a JSON string: {text!r}")
    try:
        return InternalMetadata.from_json(text)
    except InvalidInternalMetadataError as exc:
        raise InvalidInternalMetadataError(f"seek on {tp}: {exc} (internal metadata {text!r})") from None
