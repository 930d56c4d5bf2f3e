"""Users catch the KIP-232 errors from the package they use: `client_epochs` itself; the async wrappers
are importable from it too, without the package importing their clients."""

import subprocess
import sys

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


def test_the_async_wrappers_are_exported_and_loaded_only_when_asked_for():
    from client_epochs import AIOConsumer, AIOKafkaConsumer
    from client_epochs.aio import AIOConsumer as FromModule
    from client_epochs.aiokafka import AIOKafkaConsumer as AioKafkaFromModule

    assert AIOConsumer is FromModule and AIOKafkaConsumer is AioKafkaFromModule
    assert {"AIOConsumer", "AIOKafkaConsumer"} <= set(dir(client_epochs))
    with pytest.raises(AttributeError, match="NoSuchConsumer"):
        client_epochs.NoSuchConsumer  # noqa: B018
    loaded = subprocess.run([sys.executable, "-c", "import sys, client_epochs; "
                             "print(sorted({'aiokafka', 'confluent_kafka'} & set(sys.modules)))"],
                            capture_output=True, text=True, timeout=60, check=True)
    assert loaded.stdout.strip() == "[]", loaded.stdout
