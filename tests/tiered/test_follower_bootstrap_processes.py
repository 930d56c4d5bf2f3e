"""The follower bootstrap end to end: real `quorum start` brokers against moto's S3 server.

One cluster for the module (1 controller, 3 brokers, every topic RF=3) with tiered storage on every
broker, `follower.fetch.last.tiered.offset.enable=true`, small segments and a remote log task
every 200 ms. Each test makes a follower bootstrap and checks it from outside: the follower is
back in the ISR, its bootstrap report says what it fetched, every replica holds the same bytes
where their logs overlap, and every record is readable. The last one checks that a wiped broker
hands out no producer id that any producer got before (KIP-730: ids come from the controller).

The KIP-1023 bootstrap of a wiped replica runs against s3rver too (`tests.support.s3rver_server`,
a second S3 implementation), on a cluster of the same shape started for that test alone: the
bootstrap's reads (manifest, indexes, ranged GETs, the remote metadata) lean on S3's API, not on
one fake's answers. One scenario only, the cheapest that goes end to end: a cluster costs ~17 s.
"""

from __future__ import annotations

import re
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from quorum.launcher import LocalCluster
from quorum.wire.framing import RequestHeader
from quorum.wire.protocol import APIS, decode_response, encode_request
from quorum.wire.records import iter_batches
from tests.test_controller_processes import create, topic_seen_by_a_live_broker, wait_until
from tests.test_server_bad_input import _recv_exactly
from tests.tiered.fault_proxy import FaultProxy
from tests.tiered.test_tiered_processes import list_offset, produce, read_confluent
from tiered_follower.bootstrap_plugin import CRASH_STEPS
from tiered_follower.embedded_s3 import EmbeddedS3
from tiered_follower.remote_log_manager import CRASH_FILE, CRASH_KNOB

QUIET = {"log_level": 0}
BROKERS = (101, 102, 103)
SEGMENT_BYTES = 16 * 1024
DONE = re.compile(r"(\S+): bootstrap from offset (\d+) \((\S+)\): (\d+) bytes fetched from the leader, (\d+) bytes "
                  r"not fetched \(in S3\), (\d+) S3 requests, in the ISR after (\d+) ms")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, s3_server: EmbeddedS3) -> Iterator[LocalCluster]:
    yield from running_cluster(tmp_path_factory.mktemp("bootstrap"), s3_server)


@pytest.fixture
def s3rver_cluster(tmp_path_factory, s3rver_s3: EmbeddedS3) -> Iterator[LocalCluster]:
    """The module's cluster on s3rver, for one test: stopped after it, not left idle beside the other."""
    yield from running_cluster(tmp_path_factory.mktemp("bootstrap-s3rver"), s3rver_s3)


def running_cluster(directory: Path, s3_server: EmbeddedS3) -> Iterator[LocalCluster]:
    """The cluster on `s3_server` (through a fault proxy that injects nothing until a test turns it
    up), its processes stopped when the generator is closed, or when it fails to start."""
    s3_server.create_bucket("bootstrap-cluster")
    faults = FaultProxy(s3_server.endpoint_url, kinds=("slow",), rate=0.0, seed=1023, slow_s=0.5)
    settings = {
        **s3_server.properties("bootstrap-cluster", key_prefix="cluster/"),
        "rsm.config.storage.s3.endpoint.url": faults.endpoint_url,
        "offsets.topic.replication.factor": "1", "log.segment.bytes": str(SEGMENT_BYTES),
        "remote.log.manager.task.interval.ms": "200", "log.retention.check.interval.ms": "500",
        "follower.fetch.last.tiered.offset.enable": "true",
        CRASH_KNOB: "true",  # test only: a CRASH_REMOTE_UPLOAD file kills a broker at the step it names
        "broker.session.timeout.ms": "4000", "broker.heartbeat.interval.ms": "500",
        "replica.lag.time.max.ms": "2000", "replica.fetch.backoff.ms": "200", "quorum.metrics.port": "0",
    }
    running = LocalCluster(directory, controllers=1, brokers=len(BROKERS), settings=settings)
    running.faults = faults  # type: ignore[attr-defined]
    running.created = []  # type: ignore[attr-defined]  # its topics so far: a wiped broker bootstraps them all
    try:
        running.format_storage()
        running.write_configs()
        running.start()
    except BaseException:
        running.stop()
        faults.stop()
        raise
    try:
        yield running
    finally:
        running.stop()
        faults.stop()


# -- helpers ----------------------------------------------------------------------------------------------------------


def state(cluster: LocalCluster, topic: str) -> tuple[int, tuple[int, ...]]:
    """(leader, ISR) of partition 0 as an alive broker answers Metadata."""
    found = topic_seen_by_a_live_broker(cluster, BROKERS, topic)
    if found is None:
        raise OSError(f"no live broker answers Metadata naming {topic}")
    return found.partitions[0].leader, found.partitions[0].isr


def follower_of(cluster: LocalCluster, topic: str) -> tuple[int, int]:
    leader, _ = wait_until(f"a leader for {topic}", lambda: (s := state(cluster, topic))[0] in BROKERS and s)
    return leader, next(b for b in BROKERS if b != leader)


def partition_dir(cluster: LocalCluster, broker: int, topic: str) -> Path:
    return cluster.specs[broker].directory / "data" / f"{topic}-0"


def local_batches(cluster: LocalCluster, broker: int, topic: str) -> dict[int, bytes]:
    """Base offset -> the batch's bytes in the broker's local log of partition 0."""
    found: dict[int, bytes] = {}
    for path in sorted(partition_dir(cluster, broker, topic).glob("*.log")):
        data = path.read_bytes()
        walker = iter_batches(data)
        for batch in walker:
            found[batch.base_offset] = bytes(data[batch.position:walker.position])
    return found


def local_end(cluster: LocalCluster, broker: int, topic: str) -> int:
    """The next offset after the broker's local log of partition 0 (-1 when it holds no batch)."""
    ends = [-1]
    for path in sorted(partition_dir(cluster, broker, topic).glob("*.log")):
        ends += [batch.next_offset for batch in iter_batches(path.read_bytes())]
    return max(ends)


def assert_identical_where_they_overlap(cluster: LocalCluster, topic: str) -> None:
    """Every replica's local batches agree byte for byte with every other's at the same offset."""
    replicas = {b: local_batches(cluster, b, topic) for b in BROKERS}
    for one in BROKERS:
        for other in BROKERS:
            common = replicas[one].keys() & replicas[other].keys()
            assert all(replicas[one][o] == replicas[other][o] for o in common), (topic, one, other)


def log_text(cluster: LocalCluster, broker: int, since: int = 0) -> str:
    with open(cluster.specs[broker].log_path, "rb") as log:
        log.seek(since)
        return log.read().decode(errors="replace")


def log_size(cluster: LocalCluster, broker: int) -> int:
    return cluster.specs[broker].log_path.stat().st_size


def bootstrap_done(cluster: LocalCluster, broker: int, topic: str, since: int) -> re.Match[str]:
    """The broker's report line of its bootstrap of `topic`-0 written after `since`, once in the ISR."""
    def found() -> re.Match[str] | None:
        return next((m for m in DONE.finditer(log_text(cluster, broker, since)) if m.group(1) == f"{topic}-0"), None)

    match = wait_until(f"broker {broker}'s bootstrap of {topic}-0 to report it in the ISR", found, 90)
    wait_until(f"broker {broker} in the ISR of {topic}-0", lambda: broker in state(cluster, topic)[1], 60)
    return match


def restart_wiped(cluster: LocalCluster, broker: int) -> int:
    """Wipe the broker's disk and start it again with the same id; the log position before its start."""
    cluster.wipe(broker)
    since = log_size(cluster, broker)
    cluster.start_node(broker)
    return since


def metrics_text(cluster: LocalCluster, broker: int) -> str:
    port = re.findall(rf"node {broker} metrics on http://127.0.0.1:(\d+)/metrics", log_text(cluster, broker))[-1]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return answer.read().decode()


def remote_pending(cluster: LocalCluster, topic: str, above: int) -> int:
    return wait_until(f"{topic}'s earliest pending upload offset above {above}",
                      lambda: (o := list_offset(cluster, topic, -6)) > above and o)


def new_topic(cluster: LocalCluster, name: str, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **QUIET})
    create(admin, NewTopic(name, 1, 3, config={"remote.storage.enable": "true", **config}))
    cluster.created.append(name)  # type: ignore[attr-defined]


def all_caught_up_and_identical(cluster: LocalCluster) -> None:
    """Every topic of the module: its three replicas end at the same offset and agree byte for
    byte where they overlap (a crash left no log that is half the old one and half the new)."""
    for topic in cluster.created:  # type: ignore[attr-defined]
        wait_until(f"the replicas of {topic}-0 to end at the same offset",
                   lambda t=topic: len({local_end(cluster, b, t) for b in BROKERS}) == 1, 90)
        assert_identical_where_they_overlap(cluster, topic)


# -- tests ------------------------------------------------------------------------------------------------------------


# first in the module, s3rver before moto: its cluster runs and stops before the module's starts
@pytest.mark.parametrize("s3", ["s3rver", "moto"])
def test_a_wiped_replica_bootstraps_from_the_tiered_offset_and_fetches_a_fraction(
        request: pytest.FixtureRequest, s3: str) -> None:  # fmt: skip
    """KIP-1023: local retention keeps everything on the leader, yet the wiped follower fetches
    only what is not in S3; on either S3 implementation."""
    cluster: LocalCluster = request.getfixturevalue("cluster" if s3 == "moto" else "s3rver_cluster")
    topic = "bootstrap-wiped"
    new_topic(cluster, topic)
    values = produce(cluster, topic, 1500)
    pending = remote_pending(cluster, topic, 1000)
    leader, follower = follower_of(cluster, topic)
    total = sum(len(b) for b in local_batches(cluster, leader, topic).values())
    since = restart_wiped(cluster, follower)
    done = bootstrap_done(cluster, follower, topic, since)
    start, path, fetched, not_fetched, requests = (int(done.group(2)), done.group(3), int(done.group(4)),
                                                   int(done.group(5)), int(done.group(6)))  # fmt: skip
    assert path == "tiered-offset" and start >= pending
    assert fetched < total // 3 and not_fetched > total // 2, (fetched, not_fetched, total)
    assert 1 <= requests <= 3
    labels = f'{{partition="0",topic="{topic}"}}'
    exposed = metrics_text(cluster, follower)
    assert f"kafka_server_tiered_follower_bootstrap_bytes_fetched_total{labels} {float(fetched)}" in exposed
    assert f"kafka_server_tiered_follower_bootstrap_bytes_not_fetched_total{labels} {float(not_fetched)}" in exposed
    assert_identical_where_they_overlap(cluster, topic)
    assert read_confluent(cluster, topic, len(values)) == values


def test_a_follower_away_while_the_leader_tiered_and_deleted_locally_rejoins_and_serves_everything_as_leader(
        cluster: LocalCluster) -> None:  # fmt: skip
    """Issue 14's gap: OFFSET_MOVED_TO_TIERED_STORAGE sends it down KIP-405's path."""
    topic = "bootstrap-gap"
    new_topic(cluster, topic, **{"local.retention.bytes": "1"})
    values = produce(cluster, topic, 200)
    leader, follower = follower_of(cluster, topic)
    wait_until(f"{follower} in the ISR", lambda: follower in state(cluster, topic)[1])
    cluster.kill(follower)
    values += produce(cluster, topic, 1200, start=200)
    wait_until("the leader's local log to start above the follower's end",
               lambda: list_offset(cluster, topic, -4) > 400)
    since = log_size(cluster, follower)
    cluster.start_node(follower)
    done = bootstrap_done(cluster, follower, topic, since)
    assert done.group(3) == "local-log-start" and int(done.group(2)) > 200
    assert_identical_where_they_overlap(cluster, topic)
    # make it the leader: the others die; it serves the records below its local start from S3
    others = [b for b in BROKERS if b != follower]
    for broker in others:
        cluster.kill(broker)
    try:
        wait_until(f"broker {follower} to lead {topic}", lambda: state(cluster, topic)[0] == follower, 60)
        assert read_confluent(cluster, topic, len(values)) == values
    finally:
        for broker in others:
            cluster.start_node(broker)
        cluster.wait_ready()


@pytest.mark.parametrize("step", CRASH_STEPS)
def test_kill_9_of_the_follower_at_each_bootstrap_step_then_the_restart_finishes_cleanly(
        cluster: LocalCluster, step: str) -> None:  # fmt: skip
    topic = f"bootstrap-crash-{step}"
    new_topic(cluster, topic)
    values = produce(cluster, topic, 900)
    remote_pending(cluster, topic, 500)
    values += produce(cluster, topic, 30, start=900)  # records the follower fetches after its start
    _, follower = follower_of(cluster, topic)
    cluster.wipe(follower)
    (cluster.specs[follower].directory / "data" / CRASH_FILE).write_text(step)
    cluster.start_node(follower)
    process = cluster.processes[follower]
    wait_until(f"broker {follower} to kill itself at {step}", lambda: process.poll() is not None, 90)
    assert f"before the upload step {step!r}" in log_text(cluster, follower)
    cluster.start_node(follower)
    # The restart bootstraps again what had not started at its offset, and fetches on from there
    # what had; the step may have been met by another topic's bootstrap (the wipe redoes them all).
    wait_until(f"broker {follower} in the ISR of {topic}-0", lambda: follower in state(cluster, topic)[1], 90)
    all_caught_up_and_identical(cluster)
    assert read_confluent(cluster, topic, len(values)) == values


def test_a_leader_change_in_the_middle_of_a_bootstrap(cluster: LocalCluster) -> None:
    """The leader dies while the wiped follower reads its auxiliary state (S3 slowed down): the
    resolution of the old leader epoch is dropped and the follower starts over against the new
    leader, by the tiered offset or (a new leader that has not learnt it yet answers -6 with its
    log start) from its log start; either way it catches up, byte for byte."""
    topic = "bootstrap-leader-change"
    new_topic(cluster, topic)
    values = produce(cluster, topic, 900)
    remote_pending(cluster, topic, 500)
    leader, follower = follower_of(cluster, topic)
    faults: FaultProxy = cluster.faults  # type: ignore[attr-defined]
    faults.rate = 1.0  # every S3 request answers after 0.5 s: the bootstrap's reads take a while
    try:
        since = restart_wiped(cluster, follower)
        wait_until(f"broker {follower} to begin its bootstrap",
                   lambda: f"{topic}-0: follower bootstrap begins" in log_text(cluster, follower, since), 60)
        cluster.kill(leader)
        wait_until(f"a new leader of {topic}", lambda: state(cluster, topic)[0] not in (leader, -1), 60)
    finally:
        faults.rate = 0.0
    values += produce(cluster, topic, 30, start=900)
    cluster.start_node(leader)
    cluster.wait_ready()
    new_leader = state(cluster, topic)[0]
    wait_until(f"broker {follower} caught up with broker {new_leader} and in the ISR",
               lambda: follower in state(cluster, topic)[1]
               and local_end(cluster, follower, topic) == local_end(cluster, new_leader, topic) == len(values), 90)
    assert_identical_where_they_overlap(cluster, topic)
    assert read_confluent(cluster, topic, len(values)) == values


def init_producer_id(cluster: LocalCluster, broker: int) -> int:
    """A producer id from `broker` itself: InitProducerId v4, an idempotent producer's first request,
    asked again while the broker answers COORDINATOR_LOAD_IN_PROGRESS (it has no block of ids yet)."""
    api = APIS[22]
    host, port = cluster.specs[broker].address.rsplit(":", 1)

    def ask() -> tuple[int] | None:
        with socket.create_connection((host, int(port)), timeout=30) as connection:
            body = api.request(transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1)
            connection.sendall(encode_request(api, RequestHeader(api.key, 4, 1, "pid-test"), body))
            size = int.from_bytes(_recv_exactly(connection, 4), "big")
            _, answer = decode_response(api, 4, _recv_exactly(connection, size))
        return (answer.producer_id,) if answer.error_code == 0 else None

    return wait_until(f"a producer id from broker {broker}", ask, 90)[0]


def producer_ids_in_logs(cluster: LocalCluster) -> set[int]:
    """Every producer id in any batch of any partition log of any broker: ids producers wrote with."""
    found: set[int] = set()
    for broker in BROKERS:
        for path in (cluster.specs[broker].directory / "data").glob("*-*/*.log"):
            found |= {batch.producer_id for batch in iter_batches(path.read_bytes()) if batch.producer_id >= 0}
    return found


def test_a_wiped_broker_never_hands_out_a_producer_id_again(cluster: LocalCluster) -> None:
    """The broker that handed out ids is wiped and restarted with the same id: what it hands out
    next, to InitProducerId and to a real idempotent producer, no producer got before (before
    KIP-730 it started again from its first id, which a partition took for an old producer's:
    OUT_OF_ORDER_SEQUENCE_NUMBER, or its batches acknowledged as duplicates and never written)."""
    broker = BROKERS[1]
    handed_out = [init_producer_id(cluster, b) for b in BROKERS for _ in range(2)]
    assert len(set(handed_out)) == len(handed_out)
    before = set(handed_out) | producer_ids_in_logs(cluster)
    restart_wiped(cluster, broker)
    cluster.wait_ready()
    after = [init_producer_id(cluster, broker) for _ in range(3)]
    assert len(set(after)) == 3 and not set(after) & before, (after, sorted(before))
    topic = "pids-after-wipe"
    new_topic(cluster, topic)
    values = produce(cluster, topic, 40)
    assert read_confluent(cluster, topic, len(values)) == values
    leader, _ = follower_of(cluster, topic)
    written = {batch.producer_id for batch in iter_batches(b"".join(local_batches(cluster, leader, topic).values()))}
    assert written and not written & before, (written, sorted(before))
