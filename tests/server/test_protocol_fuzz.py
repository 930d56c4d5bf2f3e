"""The unit suite's slice of `quorum fuzz` (issue 19): a few thousand structure-aware garbage frames against
a live controller and broker, then the nodes are alive, every frame was answered or closed (no hang), no
handler raised, the sockets the fuzzing opened are closed again, and a real client still produces and
consumes. The million-frame run is `python -m quorum fuzz`; its figures are in the issue's closing note."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient

from quorum.fuzz.attack import ANSWERED, CLOSED
from quorum.fuzz.frames import KINDS, FrameFactory, served_apis
from quorum.fuzz.run import Plan, api_ranges, format_report, fuzz_cluster
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS
from tests.test_broker_processes import BROKER, QUIET, one_broker
from tests.test_controller_processes import create, exchange, wait_until

FRAMES = 2_000
MUTATION_RATE = 0.01
"""Partitions a second each (principal, client id) may create or delete: with quota.window.num 11, a burst of 0.11."""
CONTROLLER = 1
BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH = 53, 54


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # KIP-599's quota, so small that a client's second topic within 90 s is refused: each test's admin has a client
    # id of its own, and the fuzzer's CreateTopics floods are bounded by it.
    with one_broker(tmp_path_factory.mktemp("fuzz"), {"controller_mutation_rate": str(MUTATION_RATE)}) as (
            running, address):
        yield running, address


def test_garbage_frames_leave_both_nodes_serving(cluster):
    running, address = cluster
    # The topic first: the broker opens its forwarding connection to the controller now, not during the
    # fuzzing, where it would read as a socket the controller holds more than before.
    admin = AdminClient({"bootstrap.servers": address, "client.id": "after-fuzz", **QUIET})
    create(admin, NewTopic("after-fuzz", 1, 1))
    report = fuzz_cluster(running, Plan(FRAMES, connections=8, workers=1, seed=19, hang_deadline_s=60.0), print,
                          probe_client=False)
    table = "\n".join(format_report(report))
    assert report.problems() == [], table
    outcomes = {outcome for tally in report.tallies.values() for (_, outcome) in tally.outcomes}
    assert {ANSWERED, CLOSED} <= outcomes, table
    assert sum(t.frames for t in report.tallies.values()) == FRAMES
    assert sorted(report.tallies) == ["broker 101", "controller 1"]
    read_back(address)


def read_back(address: str) -> None:
    """A real client after the fuzzing: the broker still takes records and serves them."""
    producer = Producer({"bootstrap.servers": address, **QUIET})
    producer.produce("after-fuzz", b"still serving")
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": address, "group.id": "after-fuzz", "auto.offset.reset": "earliest",
                         **QUIET})
    consumer.subscribe(["after-fuzz"])
    try:
        for _ in range(120):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                assert message.value() == b"still serving"
                return
        raise AssertionError("the record produced after the fuzzing was not read back within 60 s")
    finally:
        consumer.close()


def test_every_kind_of_frame_is_made_for_every_served_api(cluster):
    """The generator covers what the issue lists: every API and version the node advertises, each mutation."""
    running, _ = cluster
    ranges = api_ranges("127.0.0.1", running.specs[BROKER].port)
    factory = FrameFactory(served_apis(ranges), seed=3)
    frames = [factory.next() for _ in range(10_000)]
    assert {f.kind for f in frames} == set(KINDS)
    named = {f.api.partition(" v")[0] for f in frames if f.api != "random"}
    assert named == {api.name for api in served_apis(ranges).values()}
    assert any(f.expect == "silent" for f in frames)  # acks=0 Produce among them


def test_a_bad_header_is_made_for_a_body_longer_than_an_int16_length():
    """The generator's lying client id length was the frame's own length, which a body of 10,000-character
    strings takes past int16: the worker died with struct.error at frame ~160,000 of a 200,000-frame run."""
    factory = FrameFactory(served_apis({18: (0, 3)}), seed=5)
    api = APIS[18]
    head = bytes(10)
    for _ in range(200):
        data, _ = factory._bad_header(api, 0, head, bytes(40_000))
        assert len(data) <= len(head)


def test_a_topic_of_the_longest_legal_name_is_created_written_and_deleted(cluster):
    """A 249-character topic (the fuzzer draws one): its partition directory `<topic>-0` is renamed for
    deletion with the topic cut short, as Kafka does, since `<topic>-0.<uuid>-delete` would pass the
    255-byte file name limit and the rename failed, leaving the partition for ever."""
    running, address = cluster
    topic = "t" * 249
    admin = AdminClient({"bootstrap.servers": address, "client.id": "long-name", **QUIET})
    create(admin, NewTopic(topic, 2, 1))
    producer = Producer({"bootstrap.servers": address, **QUIET})
    for partition in (0, 1):
        producer.produce(topic, b"long name", partition=partition)
    assert producer.flush(60) == 0
    broker_dir = running.specs[BROKER].directory
    assert {p.name for p in broker_dir.rglob(f"{topic}-*")} == {f"{topic}-0", f"{topic}-1"}
    for future in admin.delete_topics([topic], request_timeout=30).values():
        future.result(timeout=60)
    wait_until(f"the broker to remove the directories of the deleted 249-character topic under {broker_dir}",
               lambda: not any(p.name.startswith("t" * 200) for p in broker_dir.rglob("*")))
    assert topic not in admin.list_topics(timeout=30).topics


def quorum_leader(controller: str) -> tuple[int, int]:
    """(leader id, leader epoch) of the metadata quorum, as the controller's DescribeQuorum answers."""
    schema = APIS[55].request
    answer = exchange(controller, 55, 0, schema(topics=[schema.TopicData(
        topic_name="__cluster_metadata", partitions=[schema.TopicData.PartitionData(partition_index=0)])]))
    partition = answer.topics[0].partitions[0]
    return partition.leader_id, partition.leader_epoch


def test_forged_quorum_epoch_requests_from_a_non_voter_leave_the_controller_leading(cluster):
    """The fuzzer's BeginQuorumEpoch naming leader 9 in epoch 65535 (no cluster id, which the check skips) made
    the lone controller follow a node that does not exist: no active controller for seconds, heartbeats
    answered NOT_CONTROLLER, forwarded admin requests hanging; an EndQuorumEpoch from leader 9 did the same.
    Kafka's validateVoterOnlyRequest answers INCONSISTENT_VOTER_SET and changes nothing."""
    running, _ = cluster
    controller = running.specs[CONTROLLER].address
    leader, epoch = quorum_leader(controller)
    assert leader == CONTROLLER
    begin = APIS[BEGIN_QUORUM_EPOCH].request
    forged_begin = begin(cluster_id=None, topics=[begin.TopicData(topic_name="__cluster_metadata", partitions=[
        begin.TopicData.PartitionData(partition_index=0, leader_id=9, leader_epoch=epoch + 65535)])])
    end = APIS[END_QUORUM_EPOCH].request
    forged_end = end(cluster_id=None, topics=[end.TopicData(topic_name="__cluster_metadata", partitions=[
        end.TopicData.PartitionData(partition_index=0, leader_id=9, leader_epoch=epoch + 65535,
                                    preferred_successors=[CONTROLLER])])])
    for key, body in ((BEGIN_QUORUM_EPOCH, forged_begin), (END_QUORUM_EPOCH, forged_end)):
        answer = exchange(controller, key, 0, body)
        assert answer.topics[0].partitions[0].error_code == ErrorCode.INCONSISTENT_VOTER_SET, answer
        assert quorum_leader(controller) == (CONTROLLER, epoch), APIS[key].name


def test_a_client_past_its_controller_mutation_rate_is_refused_and_others_are_not(cluster):
    """KIP-599 end to end with kafka-python's admin client (CreateTopics v7, a strict quota; librdkafka sends v4,
    which is counted and throttled but never refused, as in Kafka). One request for two topics: the first goes
    (the bucket had tokens left, so all 3 of its partitions), the second is refused THROTTLING_QUOTA_EXCEEDED,
    and the answer's throttle time (about 290 s at this rate) pauses the client as KIP-219 says; another client
    id still creates."""
    _, address = cluster
    flooding = KafkaAdminClient(bootstrap_servers=address, client_id="flooding-admin")
    other = KafkaAdminClient(bootstrap_servers=address, client_id="another-admin")
    try:
        both = flooding.create_topics({"quota-first": {"num_partitions": 3, "replication_factor": 1},
                                       "quota-second": {"num_partitions": 1, "replication_factor": 1}},
                                      raise_errors=False)
        another = other.create_topics({"quota-other": {"num_partitions": 1, "replication_factor": 1}},
                                      raise_errors=False)
    finally:
        flooding.close()
        other.close()
    assert [(t["name"], t["error_code"], t["error_message"]) for t in both["topics"]] == [
        ("quota-first", 0, None),
        ("quota-second", ErrorCode.THROTTLING_QUOTA_EXCEEDED, "The throttling quota has been exceeded.")], both
    assert [t["error_code"] for t in another["topics"]] == [0], another
    reader = AdminClient({"bootstrap.servers": address, **QUIET})
    topics = wait_until("the broker's metadata to name quota-first and quota-other",
                        lambda: (names := set(reader.list_topics(timeout=30).topics)) >= {"quota-first", "quota-other"}
                        and names)
    assert "quota-second" not in topics
