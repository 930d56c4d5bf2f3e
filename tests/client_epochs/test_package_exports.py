"""Users catch the KIP-232 errors from the package they use: `client_epochs` itself."""

import pytest

import client_epochs
from quorum.wire import internal_metadata


def test_invalid_internal_metadata_error_is_importable_beside_topic_recreated_error():
    from client_epochs import InvalidInternalMetadataError, TopicRecreatedError

    assert InvalidInternalMetadataError is internal_metadata.InvalidInternalMetadataError
    assert {"InvalidInternalMetadataError", "TopicRecreatedError"} <= set(client_epochs.__all__)
    with pytest.raises(InvalidInternalMetadataError):
        client_epochs.InternalMetadata.from_json("not json")
    assert issubclass(TopicRecreatedError, Exception)
