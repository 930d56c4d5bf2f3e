"""KIP-232 epoch-aware metadata: a client that refuses a broker's metadata when it is older than what it knows.

A broker that has not yet learned the latest leader election or topic recreation answers Metadata
with an old view; a consumer that believes it can rewind or skip (KAFKA-6262). Here:

- `EpochCache` and `judge`/`is_outdated`: the KIP's rule, sans-IO. A response is outdated for a
  partition when its (topic_epoch, leader_epoch) is lexicographically older; -1 checks nothing;
  against Apache Kafka (no topic epoch) leader epochs and topic-id changes decide.
- `MetadataClient`: Metadata with leader and topic epochs from the cluster's brokers over
  quorum.wire, and `refresh_until_current()` with backoff, counting refused responses.

Internal metadata (the epochs stored with a committed offset) is `quorum.wire.internal_metadata`;
its `InternalMetadata` works as a floor for `refresh_until_current()` and `EpochCache.check_floors()`.
Both it and `InvalidInternalMetadataError` (unparsable internal metadata, naming the partition) are
importable from here, beside `TopicRecreatedError`: users catch them from the package they use.

Drop-in consumers: `client_epochs.confluent.Consumer` (confluent-kafka; imported from its own module
so that confluent-kafka stays an optional dependency) and `client_epochs.kafka_python.KafkaConsumer`
(kafka-python, already a dependency as quorum.wire's codec base). Their asyncio twins, with the same
guarantees and additions, waits awaited off the event loop: `client_epochs.aio.AIOConsumer` (a
confluent_kafka.aio.AIOConsumer) and `client_epochs.aiokafka.AIOKafkaConsumer` (an
aiokafka.AIOKafkaConsumer), also importable from here (`from client_epochs import AIOConsumer`):
loaded on first use, so that neither client becomes a dependency of the package.
"""

from client_epochs.connection import BrokerAuthenticationError, BrokerError, BrokerProtocolError, parse_bootstrap
from client_epochs.epoch_cache import (
    EVERYTHING,
    EpochCache,
    EpochSource,
    Interest,
    Staleness,
    Verdict,
    epochs_of,
    is_outdated,
    judge,
)
from client_epochs.errors import TopicRecreatedError
from client_epochs.metadata_client import MetadataClient, MetadataUnavailableError, StaleMetadataError
from client_epochs.model import (
    NO_EPOCH,
    NO_LEADER,
    BrokerMetadata,
    ClusterMetadata,
    Epochs,
    PartitionMetadata,
    TopicPartition,
)
from quorum.wire.internal_metadata import InternalMetadata, InvalidInternalMetadataError

__all__ = [
    "EVERYTHING", "NO_EPOCH", "NO_LEADER",
    "BrokerAuthenticationError", "BrokerError", "BrokerMetadata", "BrokerProtocolError", "ClusterMetadata",
    "EpochCache", "EpochSource", "Epochs",
    "Interest", "InternalMetadata", "InvalidInternalMetadataError", "MetadataClient", "MetadataUnavailableError",
    "PartitionMetadata", "StaleMetadataError", "Staleness",
    "TopicPartition", "TopicRecreatedError", "Verdict", "epochs_of", "is_outdated", "judge", "parse_bootstrap",
]

_ASYNC_CONSUMERS = {"AIOConsumer": "client_epochs.aio", "AIOKafkaConsumer": "client_epochs.aiokafka"}
"""The async wrappers, exported lazily: importing the package imports neither confluent-kafka nor aiokafka."""


def __getattr__(name: str) -> object:
    if name in _ASYNC_CONSUMERS:
        import importlib

        return getattr(importlib.import_module(_ASYNC_CONSUMERS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_ASYNC_CONSUMERS])
