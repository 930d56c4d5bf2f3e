"""A KRaft metadata quorum and Kafka-protocol brokers that real Kafka clients use unchanged."""

from quorum.lazy_kafka import defer_kafka_clients

__version__ = "0.1.0"

defer_kafka_clients()  # before any module here imports kafka-python's schemas (quorum.lazy_kafka)
