"""The KAFKA-6262 test knob: a broker whose Metadata answers lag behind what it replayed.

Unit tests drive `ServedImage` with a hand clock. The real-process test starts one controller and
three brokers: 101 answers as usual; 102 is paused with a `PAUSE_METADATA` file in its metadata
log dir while topic B is created, so 101 lists B and 102, still answering and still replaying
(its MetadataLag goes back to 0, it stays unfenced), does not until the file is removed; 103 has
`quorum.test.metadata.delay.ms` and lists B no sooner than that delay after B was created; restarted,
it lists itself in every Metadata answer it gives.
"""

from __future__ import annotations

import dataclasses
import re
import signal
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from quorum.admin import wait_for_leader
from quorum.broker.served_image import ServedImage
from quorum.image.image import MetadataImage, empty_image
from quorum.launcher import LocalCluster
from quorum.server.broker_role import lists_registration
from quorum.server.config import PAUSE_METADATA, node_config
from tests.image.test_delta import fence, image_of, register, unfence
from tests.test_controller_processes import create, metadata, metadata_answers, wait_until
from tests.test_snapshot_processes import metadata_dir, scrape

pytestmark = pytest.mark.timeout(300)


# -- ServedImage, by hand --------------------------------------------------------------------------


class Replay:
    """A replayed image that moves on by hand, and a clock that does too."""

    def __init__(self) -> None:
        self.now = 100.0
        self.image = self.at(-1)

    @staticmethod
    def at(offset: int) -> MetadataImage:
        return dataclasses.replace(empty_image("cluster"), offset=offset)

    def advance(self, offset: int, seconds: float = 0.0) -> None:
        self.now += seconds
        self.image = self.at(offset)


def served(replay: Replay, delay_ms: int, pause_path) -> ServedImage:
    return ServedImage(lambda: replay.image, delay_ms, pause_path, clock=lambda: replay.now)


def test_without_the_knob_answers_come_from_the_replayed_image(tmp_path) -> None:
    replay = Replay()
    answers = served(replay, 0, tmp_path / PAUSE_METADATA)
    for offset in (3, 8):
        replay.advance(offset)
        answers.replayed()
        assert answers.image is replay.image


def test_a_delay_answers_from_the_newest_image_at_least_that_old(tmp_path) -> None:
    replay = Replay()
    answers = served(replay, 5000, tmp_path / PAUSE_METADATA)  # the boot image at t=100
    replay.advance(10, seconds=1)  # t=101
    answers.replayed()
    assert answers.image.offset == -1  # nothing is 5 s old yet: the image the broker started with
    replay.advance(20, seconds=2)  # t=103
    answers.replayed()
    replay.now = 106.0
    assert answers.image.offset == 10  # replayed at 101: 5 s old; 20 (at 103) is not yet
    replay.now = 108.0
    assert answers.image.offset == 20
    replay.now = 1000.0
    assert answers.image.offset == 20  # the latest, once old enough, stays until a newer one is
    replay.advance(30)
    answers.replayed()
    assert answers.image.offset == 20
    replay.now += 5
    assert answers.image.offset == 30


def test_a_pause_file_freezes_the_answers_until_it_is_removed(tmp_path) -> None:
    replay = Replay()
    pause = tmp_path / PAUSE_METADATA
    answers = served(replay, 0, pause)
    replay.advance(5)
    answers.replayed()
    pause.touch()
    assert answers.check_pause() and answers.paused  # the periodic check: frozen at offset 5
    replay.advance(9)
    answers.replayed()
    assert answers.image.offset == 5
    pause.unlink()
    assert answers.image.offset == 9 and not answers.paused


def test_a_pause_seen_first_by_a_request_freezes_the_image_of_then(tmp_path) -> None:
    replay = Replay()
    pause = tmp_path / PAUSE_METADATA
    answers = served(replay, 0, pause)
    replay.advance(4)
    pause.touch()
    assert answers.image.offset == 4
    replay.advance(7)
    assert answers.image.offset == 4


def test_the_pause_file_is_in_the_metadata_log_dir() -> None:
    """(The delay setting's default and range: tests/server/test_config.py.)"""
    base = {"node.id": "101", "process.roles": "broker", "controller.quorum.voters": "1@127.0.0.1:9093",
            "listeners": "PLAINTEXT://127.0.0.1:9092", "log.dirs": "/tmp/x"}
    assert str(node_config(base).pause_metadata_path).endswith("__cluster_metadata-0/PAUSE_METADATA")


def test_a_restarted_broker_counts_as_listed_only_under_its_new_registration(tmp_path) -> None:
    """What a restarted broker holds its first Metadata answer for (`BrokerRole._until_listed`): the
    image it booted from may list its previous registration unfenced, the fence of its controlled
    shutdown comes after it, and an answer from that image would leave it out once the fence arrives
    (with the delay knob, for the whole delay)."""
    booted = image_of([register(DELAYED, epoch=5), unfence(DELAYED, epoch=5)])
    replay = Replay()
    replay.image = booted
    answers = served(replay, DELAY_MS, tmp_path / PAUSE_METADATA)
    assert DELAYED in answers.image.brokers and not lists_registration(answers.image, DELAYED, 40)
    for record in (fence(DELAYED, epoch=5), register(DELAYED, epoch=40), unfence(DELAYED, epoch=40)):
        replay.now += 1
        replay.image = image_of([record], replay.image)
        answers.replayed()
        assert not lists_registration(answers.image, DELAYED, 40)  # the boot image, or fenced
    replay.now += DELAY_MS / 1000
    assert lists_registration(answers.image, DELAYED, 40)


# -- real processes --------------------------------------------------------------------------------

CONTROLLER, LIVE, PAUSED, DELAYED = 1, 101, 102, 103
DELAY_MS = 3000
SETTINGS = {"quorum.metrics.port": "0", "broker.heartbeat.interval.ms": "300"}
BROKER_LAG = "kafka_controller_KafkaServer_MetadataLag"


def topics(cluster: LocalCluster, node_id: int) -> set[str]:
    return set(metadata(cluster.specs[node_id].address)[1])


def test_a_paused_broker_answers_with_old_metadata_and_a_delayed_one_late(tmp_path) -> None:
    # Started by the launcher, not node by node: a node's port is picked free when the cluster is planned,
    # and any socket on the machine bound to port 0 (another worker's nodes, their metrics endpoints, its
    # clusters being planned) may take it before the node listens; that node exits "address already in
    # use" and, started by hand, the brokers were never all unfenced, however long the wait (60 s, then
    # 120 s ran out). start() moves such a node.
    cluster = LocalCluster(tmp_path, controllers=1, brokers=3, settings=SETTINGS, stale_brokers={DELAYED: DELAY_MS})
    cluster.format_storage()
    pause = metadata_dir(cluster, PAUSED) / PAUSE_METADATA
    try:
        cluster.start(timeout=120)  # every broker unfenced and listing every broker, 103 after its delay
        live = cluster.specs[LIVE].address
        admin = AdminClient({"bootstrap.servers": live})
        create(admin, NewTopic("A", 2, 1))
        wait_until("A on every broker", lambda: all("A" in topics(cluster, b) for b in (LIVE, PAUSED, DELAYED)))

        pause.touch()
        wait_until("102 paused", lambda: re.search(r"PAUSE_METADATA exists: Metadata answers paused",
                                                   cluster.specs[PAUSED].log_path.read_text()))
        before_b = time.monotonic()
        create(admin, NewTopic("B", 1, 1))
        wait_until("B listed by 101", lambda: "B" in topics(cluster, LIVE))
        seen = topics(cluster, DELAYED)
        if time.monotonic() - before_b < DELAY_MS / 1000:  # B was replayed after before_b: not served yet
            assert "B" not in seen, seen

        # 102 answers, from the image it had when the file appeared, while its replay goes on.
        hw = wait_for_leader(lambda: [cluster.specs[CONTROLLER].address]).high_watermark
        wait_until("102 replayed B", lambda: (lambda m: m[BROKER_LAG] == 0
                                              and m["kafka_controller_KafkaController_MetadataSnapshotLag"] >= hw)(
            scrape(cluster, PAUSED)))
        for _ in range(3):
            brokers, answered = metadata(cluster.specs[PAUSED].address)
            assert "A" in answered and "B" not in answered, answered
            assert brokers == {LIVE, PAUSED, DELAYED}
            time.sleep(0.2)
        assert PAUSED in metadata(live)[0]  # heartbeats carry the replayed offset: 102 stays unfenced

        pause.unlink()
        wait_until("B listed by 102", lambda: "B" in topics(cluster, PAUSED))
        assert "PAUSE_METADATA removed: Metadata answers resume" in cluster.specs[PAUSED].log_path.read_text()

        wait_until("B listed by 103", lambda: "B" in topics(cluster, DELAYED))
        assert time.monotonic() - before_b >= DELAY_MS / 1000

        # Restarted, 103 answers from the image it replayed 3 s earlier, where it is still fenced by its
        # controlled shutdown: it holds its Metadata answers until that image lists it, as it holds them
        # until unfenced. An answer leaving the answering broker out makes librdkafka decommission it.
        cluster.kill(DELAYED, signal.SIGTERM)
        with metadata_answers(cluster.specs[DELAYED].address) as answers:
            cluster.start_node(DELAYED)
            wait_until("103 to answer Metadata after its restart", lambda: len(answers) >= 20)
        assert all(DELAYED in brokers for brokers in answers), (
            f"103 left itself out of {sum(DELAYED not in b for b in answers)} of its {len(answers)} answers")
    finally:
        pause.unlink(missing_ok=True)
        cluster.stop()
