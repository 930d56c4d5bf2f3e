"""A KRaft metadata quorum and Kafka-protocol brokers that real Kafka clients use unchanged."""

__version__ = "0.1.0"
