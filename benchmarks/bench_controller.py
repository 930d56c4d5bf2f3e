"""KIP-631's controller at KIP-630's sizing example (100,000 topics x 10 partitions, replication
factor 3, 100 brokers): what fencing one broker writes to the metadata log, beside the spec's two
designs; how long a broker takes to apply it; and topic creations committed per second by real
processes, beside the bare commit rate of the same quorum in the same run.

Run: `./run bench` (all benchmarks), `.venv/bin/python -m benchmarks.bench_controller`, or
`.venv/bin/python benchmarks/bench_controller.py`. BENCH_CONTROLLER_TOPICS scales the image down
for a quick run (the issue's figures are for the default 100,000); BENCH_CONTROLLER_CREATES sets
how many topics each creation run makes (300); BENCH_CONTROLLER_DIR picks the filesystem of the
clusters' data (a temporary directory under the current one by default).

1. The fence. The image is built as a cluster builds it: 100 RegisterBrokerRecords and
   UnfenceBrokerRecords, then every topic created by `QuorumController.create_topics` (requests
   of 1,000 topics, Kafka's striped placement) over the image as its view, the records of each
   request replayed into an `ImageState` (a node's state machine) before the next request. Then
   every broker heartbeats (`QuorumController.heartbeat`) except one, and `QuorumController.tick`
   after `broker.session.timeout.ms` fences it: it writes what Apache Kafka's controller writes,
   a PartitionChangeRecord for every partition whose ISR held the broker (a new leader from the
   ISR where it led, the ISR without it elsewhere), then a FenceBrokerRecord. The records are the
   real encoded frames the tick returned; "in the log" is those frames as the one v2 record batch
   (`quorum.wire.records.build_batch`, uncompressed, as the Raft leader appends a proposal) that
   the log stores and every Fetch carries. Beside it, from the same image, KIP-630's two designs
   ("Amount of Data Replicated"): IsrChange, one 40-byte record per partition hosting the broker,
   and a pure FenceBroker event, one 8-byte record; and what the leader sends to the 99 other
   brokers (KIP-630 counts 99).

2. Applying it. The broker's side, in the same process, on the image of step 1 (gc enabled, as on
   a node): `ImageState.apply` for each record of the fence, then `ImageState.image`, the new
   `MetadataImage` from which Metadata is answered. Every broker does this same work on its own
   machine, at the same time: the time for *every* broker to apply the delta is the time for one.
   Then a full Metadata response (every topic, v12) encoded from the new image with
   `quorum.broker.metadata.encoded_metadata_response`, which is what clients fetch next: with the
   memo of encoded topics that the old image had (a broker that served Metadata before; the
   topics the fence touched are encoded again), then once more (memo warm); and, for reference,
   from the old image with no memo at all (a broker's first answer). Steps 1 and 2 run in a child
   process, whose peak resident memory is reported.

3. Topic creations per second, real processes on 127.0.0.1: `quorum.launcher.LocalCluster` with 3
   controllers and 3 brokers, then with 1 controller and 3 brokers, default settings (fsync on).
   confluent-kafka's AdminClient, bootstrapped on the brokers, which forward CreateTopics to the
   active controller, creates BENCH_CONTROLLER_CREATES topics in each run: one topic per
   create_topics call, each awaited before the next ("sequential"); one topic per call, every
   call made at once ("calls at once"); all topics in one call, each with 1 partition and
   replication factor 1, and with 3 partitions and replication factor 3. The clock stops when
   every topic's future has resolved (the controller answers once the records are committed).
   Beside each RF=3 row, issue 17's goal: at least 300 RF=3 partitions created per second.
   Then IDLE_CALLS topics one at a time, each IDLE_MS after the previous answer, timing the calls
   only: what a user creating a topic on a quiet cluster waits. Beside them, on the same
   cluster: the same one-topic CreateTopics requests sent sequentially straight to the active
   controller on one connection (`quorum.net.peer_client.PeerClient`, as a broker forwards
   them), the controller path without the client library and the broker's forwarding; and
   `quorum.admin.QuorumWriter` committing one NoOpRecord per commit sequentially (Produce to
   `__cluster_metadata` through the leader, answered once committed), the bare Raft commit that
   each creation pays for.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import random
import resource
import statistics
import sys
import tempfile
import time
import traceback
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `quorum` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.table import print_table, progress  # noqa: E402
from benchmarks.table import run_child as run_step

TOPICS = int(os.environ.get("BENCH_CONTROLLER_TOPICS", "100000"))
PARTITIONS = 10
BROKERS = 100
REPLICATION = 3
TOPICS_PER_REQUEST = 500
"""Topics per CreateTopics while building the image: 500 x (1 + 10 partitions) = 5,500 records, under
the controller's MAX_RECORDS_PER_USER_OP (10,000, Kafka's), which refuses 1,000 such topics in one request."""
VICTIM = 1  # the broker that stops heartbeating
CREATES = int(os.environ.get("BENCH_CONTROLLER_CREATES", "300"))
IDLE_CALLS = min(CREATES, 20)  # creations made one at a time with a pause before each
IDLE_MS = 50
GOAL_PARTITIONS_PER_SECOND = 300  # issue 17: RF=3 partitions created per second, Kafka's pace
SHAPES = ((1, 1), (3, 3))  # (partitions, replication factor) of the created topics
CLUSTERS = ((3, 3), (1, 3))  # (controllers, brokers)
ISR_CHANGE_BYTES = 40  # KIP-630: 4 partition id + 16 topic id + 8 ISR + 4 leader + 4 leader epoch + 2 + 2
FENCE_EVENT_BYTES = 8  # KIP-630: 4 broker id + 2 api key + 2 api version
METADATA_VERSION = 12
CREATE_TOPICS_VERSION = 5
ROOT = Path(__file__).resolve().parent.parent
MiB = 1 << 20


# -- steps 1 and 2, in a child process ----------------------------------------------------------------


def peak_rss_mb() -> float:
    """This process's peak resident set size (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6


def fence_child() -> dict[str, Any]:
    from quorum.broker.metadata import encoded_metadata_response
    from quorum.controller import ControllerConfig, QuorumController
    from quorum.controller import records as rec
    from quorum.image.delta import MetadataDelta
    from quorum.image.image_state import ImageState
    from quorum.wire.metadata_records import decode_metadata_record
    from quorum.wire.protocol import APIS
    from quorum.wire.records import Record, build_batch

    clock = time.perf_counter
    state = ImageState(listener="PLAINTEXT", cluster_id="MkU3OEVBNTcwNTJENDM2Qg", controller_id=1)
    next_offset = 0

    def replay(values: tuple[bytes, ...] | list[bytes]) -> None:
        nonlocal next_offset
        for value in values:
            state.apply(next_offset, value)
            next_offset += 1

    # The build is set-up, not measured: no cyclic gc while a million objects are made (as a node's snapshot load).
    gc.disable()
    built = clock()
    for broker in range(1, BROKERS + 1):
        replay([rec.encode(rec.register_broker(
            broker_id=broker, incarnation_id=uuid.UUID(int=broker), broker_epoch=next_offset,
            endpoints=[("PLAINTEXT", f"broker-{broker}.example", 9092, 0)],
            features=[("metadata.version", 1, 21)], rack=None))])  # fmt: skip
    for broker, registration in state.image.registrations.items():
        replay([rec.encode(rec.unfence_broker(broker, registration.broker_epoch))])
    controller = QuorumController("MkU3OEVBNTcwNTJENDM2Qg", ControllerConfig(), random.Random(631))
    create = APIS[19].request
    creatable = create.CreatableTopic
    create_seconds = apply_seconds = 0.0
    build_records = 0
    for first in range(0, TOPICS, TOPICS_PER_REQUEST):
        names = [f"topic-{n:06d}" for n in range(first, min(TOPICS, first + TOPICS_PER_REQUEST))]
        request = create(topics=[creatable(name=name, num_partitions=PARTITIONS, replication_factor=REPLICATION,
                                           assignments=[], configs=[]) for name in names],
                         timeout_ms=30_000, validate_only=False)  # fmt: skip
        began = clock()
        result = controller.create_topics(request, state.image)
        decided = clock()
        assert all(t.error_code == 0 for t in result.response.topics), result.response
        replay(result.records)
        state.image  # noqa: B018  # build the image the next request decides against
        apply_seconds += clock() - decided
        create_seconds += decided - began
        build_records += len(result.records)
        done = first + len(names)
        if done % max(TOPICS // 10, TOPICS_PER_REQUEST) == 0 or done == TOPICS:
            progress(f"image: {done:,} of {TOPICS:,} topics created through QuorumController.create_topics "
                     f"({clock() - built:.0f} s)")
    build_seconds = clock() - built
    gc.enable()
    gc.collect()  # the garbage of the build is not the fence's to pay for
    before = state.image
    assert len(before.topics) == TOPICS and len(before.brokers) == BROKERS

    # What the victim hosts, leads, and is in the ISR of.
    hosted = led = in_isr = 0
    for topic in before.topics.values():
        for partition in topic.partitions:
            hosted += VICTIM in partition.replicas
            led += partition.leader == VICTIM
            in_isr += VICTIM in partition.isr

    # Everyone heartbeats but the victim; the tick after the session timeout fences it.
    heartbeat = APIS[63].request
    controller.tick(0, before)  # the controller starts every broker's session now
    now_ms = controller.config.session_timeout_ms + 1
    for broker, registration in before.registrations.items():
        if broker != VICTIM:
            answer = controller.heartbeat(heartbeat(broker_id=broker, broker_epoch=registration.broker_epoch,
                                                    current_metadata_offset=next_offset - 1, want_fence=False,
                                                    want_shut_down=False), now_ms, before, next_offset)  # fmt: skip
            assert not answer.records and answer.response.error_code == 0, answer
    progress(f"fence: QuorumController.tick {controller.config.session_timeout_ms + 1} ms after broker {VICTIM}'s "
             "last heartbeat")
    began = clock()
    result = controller.tick(now_ms, before)
    tick_seconds = clock() - began
    assert result.response.fenced == (VICTIM,), result.response
    fence = list(result.records)

    kinds: Counter[str] = Counter()
    kind_bytes: Counter[str] = Counter()
    for value in fence:
        record = decode_metadata_record(value)
        kind = type(record).__name__
        if kind == "PartitionChangeRecord":
            old = before.topic_by_id(record.topic_id).partitions[record.partition_id]
            kind += ", ISR only" if record.leader in (rec.NO_LEADER_CHANGE, old.leader) else ", new leader"
        kinds[kind] += 1
        kind_bytes[kind] += len(value)
    base = next_offset
    batch = build_batch([Record(base + i, 1_763_700_000_000, None, value, []) for i, value in enumerate(fence)],
                        base_offset=base, partition_leader_epoch=1)  # fmt: skip

    # Step 2: a broker's Metadata memo as a serving broker has it, then the delta applied.
    metadata_request = APIS[3].request(version=METADATA_VERSION, topics=None, allow_auto_topic_creation=False,
                                       include_topic_authorized_operations=False)  # fmt: skip
    progress("metadata: full Metadata response from the old image, no memo (then warm)")
    began = clock()
    cold_body = encoded_metadata_response(before, metadata_request, METADATA_VERSION)
    cold_seconds = clock() - began
    began = clock()
    encoded_metadata_response(before, metadata_request, METADATA_VERSION)
    warm_before_seconds = clock() - began

    progress(f"apply: {len(fence):,} records into the broker's ImageState, then the new image")
    began = clock()
    replay(fence)
    replayed = clock()
    after = state.image
    applied = clock()
    replay_seconds, image_seconds = replayed - began, applied - replayed
    reencoded = sum(1 for name in after.topics if (name, METADATA_VERSION) not in after.encoded)
    began = clock()
    after_body = encoded_metadata_response(after, metadata_request, METADATA_VERSION)
    after_seconds = clock() - began
    began = clock()
    encoded_metadata_response(after, metadata_request, METADATA_VERSION)
    warm_after_seconds = clock() - began
    changed_topics = sum(1 for name, topic in after.topics.items() if before.topics[name] is not topic)

    # The fence did what it must: the broker is gone from Metadata and leads nothing; its partitions' epochs went up.
    assert VICTIM not in after.brokers and after.registrations[VICTIM].fenced
    moved = 0
    for name, topic in after.topics.items():
        old = before.topics[name].partitions
        for partition in topic.partitions:
            assert partition.leader != VICTIM and VICTIM not in partition.isr or len(partition.isr) == 1
            if VICTIM in old[partition.partition].isr:
                assert partition.leader_epoch > old[partition.partition].leader_epoch
                moved += 1
    assert moved == in_isr

    # The same delta again, over the same old image, with MetadataDelta alone (ImageState's work without it).
    repeats = []
    for _ in range(2):
        began = clock()
        delta = MetadataDelta(before)
        for offset, value in enumerate(fence, base):
            delta.replay(value, offset)
        delta.apply()
        repeats.append(clock() - began)

    return {
        "topics": len(before.topics), "partitions": sum(len(t.partitions) for t in before.topics.values()),
        "brokers": len(before.brokers), "build_seconds": build_seconds, "create_seconds": create_seconds,
        "build_apply_seconds": apply_seconds, "build_records": build_records,
        "hosted": hosted, "led": led, "in_isr": in_isr, "tick_seconds": tick_seconds,
        "records": len(fence), "record_bytes": sum(map(len, fence)), "batch_bytes": len(batch),
        "kinds": dict(kinds), "kind_bytes": dict(kind_bytes),
        "replay_seconds": replay_seconds, "image_seconds": image_seconds, "repeats": repeats,
        "changed_topics": changed_topics, "reencoded_topics": reencoded,
        "cold_seconds": cold_seconds, "warm_before_seconds": warm_before_seconds,
        "after_seconds": after_seconds, "warm_after_seconds": warm_after_seconds,
        "metadata_bytes": len(after_body), "metadata_bytes_before": len(cold_body),
        "peak_rss_mb": peak_rss_mb(),
    }  # fmt: skip


def run_child() -> dict[str, Any]:
    """Steps 1 and 2 in a child process (see `benchmarks.table.run_child`)."""
    return run_step("benchmarks.bench_controller")


# -- step 3: real processes ---------------------------------------------------------------------------


@dataclass
class Run:
    what: str
    calls: int
    topics: int
    records: int
    seconds: float
    latencies: list[float] = field(default_factory=list)
    partitions: int = 0  # a topic's
    factor: int = 0

    @property
    def per_second(self) -> float:
        return (self.topics or self.calls) / self.seconds

    @property
    def goal(self) -> str:
        """The issue's goal beside the figure: >= GOAL_PARTITIONS_PER_SECOND RF=3 partitions/s."""
        if self.factor != 3:
            return "-"
        rate = self.topics * self.partitions / self.seconds
        return f">= {GOAL_PARTITIONS_PER_SECOND}: {'met' if rate >= GOAL_PARTITIONS_PER_SECOND else 'NOT met'}"


@dataclass
class ClusterResult:
    controllers: int
    brokers: int
    runs: list[Run] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.controllers} controller{'s' if self.controllers > 1 else ''} + {self.brokers} brokers"


def _wait(what: str, check: Any, timeout_s: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            found = check()
        except Exception as exc:  # not up yet
            last, found = exc, None
        if found:
            return found
        time.sleep(0.2)
    raise RuntimeError(f"not ready within {timeout_s:.0f}s: {what}" + (f" (last error: {last!r})" if last else ""))


def raw_commits(addresses: list[str], count: int) -> Run:
    """`count` commits of one NoOpRecord each, sequentially, through the leader."""
    from quorum.admin import QuorumWriter
    from quorum.wire import metadata_records as mr

    value = mr.encode_metadata_record(mr.NoOpRecord(version=0))

    async def go() -> Run:
        writer = QuorumWriter(addresses, timeout_ms=30_000)
        try:
            for _ in range(5):  # connect, find the leader
                await writer.commit([value])
            latencies = []
            start = time.perf_counter()
            for _ in range(count):
                began = time.perf_counter()
                await writer.commit([value])
                latencies.append(time.perf_counter() - began)
            return Run("bare commit: QuorumWriter, 1 NoOpRecord/commit, sequential", count, 0, count,
                       time.perf_counter() - start, latencies)
        finally:
            await writer.close()

    return asyncio.run(go())


def create_topics(admin: Any, prefix: str, partitions: int, factor: int, mode: str) -> Run:
    """CREATES topics `prefix`-0.. with the AdminClient; the time until every future resolved.
    "idle": IDLE_CALLS sequential calls, each IDLE_MS after the last answer; the time is the sum of
    the calls' own times (the idle time left out)."""
    from confluent_kafka.admin import NewTopic

    count = IDLE_CALLS if mode == "idle" else CREATES
    topics = [NewTopic(f"{prefix}-{n:05d}", partitions, factor) for n in range(count)]
    latencies: list[float] = []
    start = time.perf_counter()
    if mode in ("sequential", "idle"):
        for topic in topics:
            if mode == "idle":
                time.sleep(IDLE_MS / 1000)
            began = time.perf_counter()
            for future in admin.create_topics([topic], request_timeout=60).values():
                future.result(timeout=120)
            latencies.append(time.perf_counter() - began)
        calls = count
    elif mode == "concurrent":
        futures = [f for topic in topics for f in admin.create_topics([topic], request_timeout=120).values()]
        for future in futures:
            future.result(timeout=300)
        calls = count
    else:
        for future in admin.create_topics(topics, request_timeout=120).values():
            future.result(timeout=300)
        calls = 1
    seconds = sum(latencies) if mode == "idle" else time.perf_counter() - start
    how = {"sequential": "1 topic/call, sequential", "concurrent": f"1 topic/call, {count} calls at once",
           "batched": f"{count} topics in 1 call",
           "idle": f"1 topic/call, each {IDLE_MS} ms after the last answer (idle left out)"}[mode]
    return Run(f"{_shape(partitions, factor)}, AdminClient via the brokers, {how}", calls,
               count, count * (1 + partitions), seconds, latencies, partitions, factor)


def create_at_controller(address: str, prefix: str, partitions: int, factor: int) -> Run:
    """CREATES CreateTopics requests of one topic each, sequentially, sent straight to the active
    controller on one connection (`PeerClient`, as a broker forwards them): the controller path
    without the client library and the broker in between."""
    from quorum.net.peer_client import PeerClient
    from quorum.wire.protocol import APIS

    api = APIS[19]
    item = api.request.CreatableTopic

    async def go() -> Run:
        host, _, port = address.rpartition(":")
        client = PeerClient(host, int(port), "bench-controller", 60_000)
        try:
            latencies = []
            start = time.perf_counter()
            for n in range(CREATES):
                body = api.request(topics=[item(name=f"{prefix}-{n:05d}", num_partitions=partitions,
                                                replication_factor=factor, assignments=[], configs=[])],
                                   timeout_ms=60_000, validate_only=False)  # fmt: skip
                began = time.perf_counter()
                response = await client.request(api, CREATE_TOPICS_VERSION, body)
                latencies.append(time.perf_counter() - began)
                (answer,) = response.topics
                if answer.error_code:
                    raise RuntimeError(f"CreateTopics {answer.name}: error {answer.error_code} {answer.error_message}")
            return Run(f"{_shape(partitions, factor)}, straight to the active controller (PeerClient), "
                       "1 topic/request, sequential", CREATES, CREATES, CREATES * (1 + partitions),
                       time.perf_counter() - start, latencies, partitions, factor)  # fmt: skip
        finally:
            await client.close()

    return asyncio.run(go())


def _shape(partitions: int, factor: int) -> str:
    return f"P{partitions} RF{factor}"


def measure_cluster(base: Path, controllers: int, brokers: int) -> ClusterResult:
    from confluent_kafka.admin import AdminClient, NewTopic

    from quorum.admin import METADATA_WRITES_FOR_TESTS, wait_for_leader
    from quorum.launcher import LocalCluster

    result = ClusterResult(controllers, brokers)
    # the bare-commit row's QuorumWriter commits through Produce to __cluster_metadata: a test-only setting
    cluster = LocalCluster(base / f"cluster-{controllers}c{brokers}b", controllers=controllers, brokers=brokers,
                           settings=METADATA_WRITES_FOR_TESTS)
    progress(f"{result.label}: starting `quorum start` processes")
    admin = None
    try:
        cluster.format_storage()
        cluster.start()
        voters = [s.address for s in cluster.specs.values() if s.role == "controller"]
        broker_addresses = [s.address for s in cluster.specs.values() if s.role == "broker"]
        leader = cluster.specs[wait_for_leader(lambda: voters, timeout_s=90.0).leader_id].address
        admin = AdminClient({"bootstrap.servers": ",".join(broker_addresses)})
        _wait(f"{brokers} unfenced brokers in Metadata",
              lambda: len(admin.list_topics(timeout=5).brokers) == brokers)  # fmt: skip
        for future in admin.create_topics([NewTopic("warm-up", 1, 1)], request_timeout=60).values():
            future.result(timeout=120)
        progress(f"{result.label}: {CREATES} bare commits, 1 record each")
        result.runs.append(raw_commits(voters, CREATES))
        progress(f"{result.label}:   {result.runs[-1].per_second:,.0f} commits/s")
        for partitions, factor in SHAPES:
            progress(f"{result.label}: {CREATES} topics ({partitions} partitions, RF {factor}) straight to the "
                     "active controller, sequential")
            run = create_at_controller(leader, f"p{partitions}-rf{factor}-direct", partitions, factor)
            result.runs.append(run)
            progress(f"{result.label}:   {run.per_second:,.0f} topics/s ({run.seconds:.2f} s)")
            modes = ("sequential", "concurrent", "batched") + (("idle",) if (partitions, factor) == SHAPES[0] else ())
            for mode in modes:
                prefix = f"p{partitions}-rf{factor}-{mode}"
                progress(f"{result.label}: {IDLE_CALLS if mode == 'idle' else CREATES} topics ({partitions} "
                         f"partitions, RF {factor}), {mode}")
                run = create_topics(admin, prefix, partitions, factor, mode)
                result.runs.append(run)
                progress(f"{result.label}:   {run.per_second:,.0f} topics/s ({run.seconds:.2f} s)")
    except Exception as exc:
        result.errors.append(f"{result.label}: {exc!r}")
        tails = []
        for spec in cluster.specs.values():
            try:
                lines = spec.log_path.read_text(errors="replace").splitlines()[-15:]
            except OSError:
                lines = []
            tails.append(f"--- node {spec.node_id} ({spec.log_path}):\n" + "\n".join(lines))
        print(f"!!! {result.label} failed:\n{traceback.format_exc()}" + "\n".join(tails), file=sys.stderr, flush=True)
    finally:
        admin = None
        progress(f"{result.label}: stopping")
        cluster.stop()
    return result


# -- the tables -------------------------------------------------------------------------------------


def mib(n: float) -> str:
    return f"{n / MiB:,.2f}"


def fence_tables(f: dict[str, Any]) -> None:
    others = f["brokers"] - 1
    kinds, kind_bytes = f["kinds"], f["kind_bytes"]
    rows: list[list[object]] = [
        ["this project (Kafka's design)", f["records"], f["record_bytes"], f["batch_bytes"], mib(f["batch_bytes"]),
         mib(f["batch_bytes"] * others), "QuorumController.tick: PartitionChange per ISR it was in + FenceBroker"],
    ]
    for kind in sorted(kinds, key=lambda k: (not k.startswith("Partition"), k)):
        count = kinds[kind]
        rows.append([f"  {kind}", count, kind_bytes[kind], "", "", "",
                     f"{kind_bytes[kind] / count:.1f} bytes each (type/version frame + fields + tags)"])
    rows += [
        ["KIP-630: IsrChange per partition", f["hosted"], f["hosted"] * ISR_CHANGE_BYTES, "-",
         mib(f["hosted"] * ISR_CHANGE_BYTES), mib(f["hosted"] * ISR_CHANGE_BYTES * others),
         f"{ISR_CHANGE_BYTES} bytes x partitions hosting broker {VICTIM} (KIP-630: 1.14 MiB, 113.29 MiB)"],
        ["KIP-630: FenceBroker event only", 1, FENCE_EVENT_BYTES, "-", mib(FENCE_EVENT_BYTES),
         mib(FENCE_EVENT_BYTES * others), "one record; brokers derive the ISR changes (KIP-630: 0.77 KB sent)"],
    ]
    print_table(
        f"One broker fenced: {f['topics']:,} topics x {PARTITIONS} partitions (RF {REPLICATION}), {f['brokers']} "
        f"brokers; broker {VICTIM} hosts {f['hosted']:,} partitions, leads {f['led']:,}, is in {f['in_isr']:,} ISRs.\n"
        "Records and bytes appended to the metadata log, and what the leader sends to the other brokers",
        ["design", "records", "record bytes", "bytes in log", "MiB in log", f"MiB to {others} brokers", "what"],
        rows, left=(-1,))
    print("  The project writes what Apache Kafka's controller writes: a PartitionChangeRecord per partition whose "
          f"ISR held the broker ({kinds.get('PartitionChangeRecord, new leader', 0):,} with a new leader, "
          f"{kinds.get('PartitionChangeRecord, ISR only', 0):,} ISR only),\n  then the FenceBrokerRecord, all in one "
          "batch: KIP-630's IsrChange design in substance, not the FenceBroker-only event. "
          f"{f['batch_bytes'] / (f['hosted'] * ISR_CHANGE_BYTES):.2f}x the IsrChange estimate, "
          f"{f['batch_bytes'] / FENCE_EVENT_BYTES:,.0f}x the event.")

    repeats = ", ".join(f"{s:.3f}" for s in f["repeats"])
    apply_total = f["replay_seconds"] + f["image_seconds"]
    rows = [
        ["controller: tick that fences the broker", f["tick_seconds"], "", f"{f['records']:,} records decided and "
         "encoded (scans every partition)"],
        ["broker: apply the fence delta", apply_total, "", f"ImageState.apply x {f['records']:,} + ImageState.image; "
         f"MetadataDelta alone again: {repeats} s"],
        ["  replay the records", f["replay_seconds"], "", "decode each record into the delta"],
        ["  build the new image", f["image_seconds"], "", f"{f['changed_topics']:,} of {f['topics']:,} topics "
         "rebuilt (their replicas went offline or their partitions changed)"],
        ["broker: full Metadata from the new image", f["after_seconds"], f["metadata_bytes"] / 1e6,
         f"v{METADATA_VERSION}, every topic; the old image's memo kept, {f['reencoded_topics']:,} topics encoded "
         "again"],
        ["broker: full Metadata again (memo warm)", f["warm_after_seconds"], f["metadata_bytes"] / 1e6,
         "the next client's answer"],
        ["broker: full Metadata, no memo (reference)", f["cold_seconds"], f["metadata_bytes_before"] / 1e6,
         "from the old image, a broker's first answer; old image, memo warm: "
         f"{f['warm_before_seconds']:.3f} s"],
        ["image build (set-up)", f["build_seconds"], "", f"{f['build_records']:,} records: "
         f"QuorumController.create_topics {f['create_seconds']:.1f} s "
         f"({f['topics'] / f['create_seconds']:,.0f} topics/s, no I/O), replay + image builds "
         f"{f['build_apply_seconds']:.1f} s"],
        ["peak RSS of the child (MB)", f["peak_rss_mb"], "", "the image, the old one kept beside the new, the memo"],
    ]
    print_table(
        f"Applying the fence on a broker ({f['records']:,} records, {f['batch_bytes'] / 1e6:.2f} MB), one process. "
        f"Every broker ({f['brokers']}) does this same work on its own machine at the same time,\n"
        "so the time for every broker to apply the delta is the per-broker time below (plus fetching the bytes above)",
        ["step", "seconds", "MB", "what"], rows, left=(-1,))


def create_table(results: list[ClusterResult]) -> None:
    rows = []
    for cluster in results:
        runs = cluster.runs
        bare = next((r for r in runs if r.topics == 0), None)
        for run in runs:
            p50 = f"{statistics.median(run.latencies) * 1000:.1f}" if run.latencies else "-"
            worst = f"{max(run.latencies) * 1000:.1f}" if run.latencies else "-"
            if run is bare:
                versus = "1.00x"
            elif bare is not None and run.latencies:
                versus = f"{bare.per_second / run.per_second:.2f}x"
            else:
                versus = "-"
            partitions = f"{run.topics * run.partitions / run.seconds:,.0f}" if run.partitions else "-"
            rows.append([cluster.label, run.what, run.calls, run.topics or "-", run.records, run.seconds,
                         f"{run.per_second:,.1f}", partitions, run.goal, p50, worst, versus])
        for error in cluster.errors:
            rows.append([cluster.label, f"FAILED: {error}", "", "", "", "", "", "", "", "", "", ""])
    print_table(
        f"Topic creations committed per second: confluent-kafka AdminClient via the brokers, real processes on "
        f"127.0.0.1, fsync on ({os.cpu_count()} cores shared by all);\n"
        "beside the bare Raft commit rate of the same cluster (\"time/call vs bare\": a sequential call's mean time "
        "over a bare commit's; P: partitions a topic, RF: replication factor)",
        ["cluster", "operation", "calls", "topics", "records", "seconds", "topics/s (commits/s)",
         "partitions/s", "goal (RF3 partitions/s)", "p50 ms/call", "max ms/call", "time/call vs bare"],
        rows, left=(1,))
    print("  Calls at once: the broker forwards them without waiting for the answers, the controller reads them the "
          "same way (answers in request order,\n  quorum.server.listener's pipelined APIs), decides the requests "
          "waiting together against its pending view and commits them as one batch\n  (quorum.server."
          "controller_service). A sequential call pays a whole commit (the bare commit row) plus the forward; a "
          "batched call is one request and one\n  commit of all its records. A creation is answered once committed; "
          "the brokers open the new logs after that, in a worker thread.")


def main() -> None:
    started = time.monotonic()
    progress(f"fence: {TOPICS:,} topics x {PARTITIONS} partitions, {BROKERS} brokers (a child process)")
    errors: list[str] = []
    try:
        fence = run_child()
    except Exception as exc:
        errors.append(f"fence: {exc!r}")
        fence = None
    base = Path(os.environ.get("BENCH_CONTROLLER_DIR", "."))
    with tempfile.TemporaryDirectory(prefix="bench-controller-", dir=base) as name:
        clusters = [measure_cluster(Path(name).resolve(), c, b) for c, b in CLUSTERS]
    if fence is not None:
        fence_tables(fence)
    create_table(clusters)
    print(f"  ({time.monotonic() - started:.0f}s in all)")
    errors += [e for c in clusters for e in c.errors]
    for error in errors:
        print(f"  ERROR: {error}")
    if errors:
        sys.exit(1)


if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:
        print(json.dumps(fence_child()), flush=True)
    else:
        main()
