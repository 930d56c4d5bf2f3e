"""The replicator restarted after its source topic was deleted and created again: it refuses, naming both
topic ids, instead of resuming the new topic at the old copy's offset.

Deleting the topic removes the group's commits (as Kafka does), so the restarted replicator's only
evidence of where it got to is the target: its last copy's provenance, and the internal metadata
that copy was read under (`client_epochs.source_epochs`). The copy names the topic id, so the
resume seek onto the new topic is recognised as a recreation with certainty. Without the id the
epochs alone do not tell (the new topic's leader epoch need not be lower than the old one's), and
the replicator went on at offset 20 of the new topic: its first 20 records were never copied.
"""

from __future__ import annotations

import io

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

import client_epochs.confluent
from client_epochs.errors import TopicRecreatedError
from client_epochs.mirror import DEFAULT_GROUP, MirrorOptions, Replicator
from client_epochs.mirror.progress import EPOCHS_HEADER, read_provenance
from quorum.launcher import KAFKA_COMPATIBLE, LocalCluster
from quorum.wire.internal_metadata import topic_id_text
from tests.client_epochs.wrapper_cluster import OneBrokerCluster
from tests.test_controller_processes import wait_until

pytestmark = pytest.mark.timeout(180)

TOPIC = "rc"
QUIET = {"log_level": 0}
SETTINGS = {"auto.create.topics.enable": "false", "group.initial.rebalance.delay.ms": "0"}


def copies(bootstrap: str, expected: int) -> list:
    """The target's records of TOPIC partition 0, read until `expected` are there (or 30 s)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, **QUIET})
    try:
        consumer.subscribe([TOPIC])
        got: list = []
        wait_until(f"{expected} copies in the target",
                   lambda: got.extend(m for m in consumer.consume(100, 0.5) if m.error() is None)
                   or len(got) >= expected, timeout_s=30)
        return got
    finally:
        consumer.close()


def high_watermark(bootstrap: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", **QUIET})
    try:
        return consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)[1]
    finally:
        consumer.close()


def replicate(source: str, target: str, group: str = DEFAULT_GROUP) -> tuple[Replicator, str]:
    replicator = Replicator(source, target, [TOPIC], MirrorOptions(group=group, stop_after_idle_s=3,
                                                                   status_interval_s=1, consumer_config=QUIET,
                                                                   producer_config=QUIET),
                            out=(out := io.StringIO()))
    try:
        replicator.run()
    finally:
        print(out.getvalue())
    return replicator, out.getvalue()


def resume_without_commits_while_librdkafka_loses_the_broker(source: str, target: str) -> None:
    """A replicator of another group (nothing committed) finds the copies in the target and needs the
    source's log start to know they are all there. librdkafka's watermark lookup raised _DESTROY_BROKER
    out of the assignment when the broker it asked was killed meanwhile (the SASL_SSL mirror scenario
    in CI), and the replicator died of it; it now asks the current leader itself, with retries."""
    def destroyed(*_args, **_kwargs):
        raise KafkaException(KafkaError(KafkaError._DESTROY_BROKER, "Failed to get watermark offsets: Local: "
                                        "Broker handle destroyed without termination"))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(client_epochs.confluent.Consumer, "get_watermark_offsets", destroyed)
        replicator, _ = replicate(source, target, group="another-group")
    assert replicator.counts.replicated == 0
    assert replicator.counts.skipped_already_copied == 20
    assert high_watermark(target) == 20


@pytest.mark.parametrize("mode", ["kip232", "kafka-compatible"])
def test_a_restarted_replicator_refuses_a_source_topic_recreated_since_its_last_copy(tmp_path, mode):
    """Both clusters in both broker modes (issue 33): the copy names the source topic's id either way."""
    settings = {**SETTINGS, **(KAFKA_COMPATIBLE if mode == "kafka-compatible" else {})}
    clusters = [LocalCluster(tmp_path / name, controllers=1, brokers=1, settings=settings)
                for name in ("source", "target")]
    try:
        for cluster in clusters:
            cluster.format_storage()
            cluster.start()
        source = OneBrokerCluster(clusters[0], clusters[0].bootstrap_servers)
        target = clusters[1].bootstrap_servers
        source.topic(TOPIC, 20)
        old_id = source.epochs(TOPIC).topic_id
        replicator, _ = replicate(source.address, target)
        assert replicator.counts.replicated == 20
        copied = copies(target, 20)
        last = read_provenance(copied[-1].headers())
        assert last is not None and last.source.offset == 19
        assert last.epochs is not None and last.epochs.topic_id == old_id, dict(copied[-1].headers())[EPOCHS_HEADER]
        resume_without_commits_while_librdkafka_loses_the_broker(source.address, target)

        source.recreate(TOPIC)  # the group's commit goes with the old topic
        source.produce(TOPIC, 30)
        new_id = source.epochs(TOPIC).topic_id
        assert new_id != old_id
        with pytest.raises(TopicRecreatedError) as raised:
            replicate(source.address, target)
        assert topic_id_text(old_id) in str(raised.value) and topic_id_text(new_id) in str(raised.value)
        assert high_watermark(target) == 20  # nothing of the new topic was copied from offset 20
    finally:
        for cluster in clusters:
            cluster.stop()
