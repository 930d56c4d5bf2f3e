"""The project's tagged-field numbers in Kafka's messages (KIP-482 tags Kafka leaves unused), in one place.

Clients that do not know a tag skip it; this SDK reads it. They live apart from the schemas that carry
them so that a module needing a number (the Metadata codec of a client, say) does not import every
metadata record's schema to learn it.
"""

TOPIC_EPOCH_TAG = 10232
"""KIP-232's topic epoch: in TopicRecord, in MetadataResponse topics and in OffsetCommitValue v4+."""

TOPIC_ID_TAG = 10233
"""The committed topic's id in OffsetCommitValue v4+."""
