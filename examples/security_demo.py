"""Part 9 of the demo: a secured cluster as its users meet it (issue 18).

`quorum local-cluster --security sasl_ssl`: a CA and node certificates, the controller on mutual TLS,
the broker on SASL_SSL with SCRAM-SHA-512, and Kafka's StandardAuthorizer with `admin` (and the nodes)
as super users and no access for anyone else. A client with a wrong password is refused at login; alice,
who has a password but no ACLs, is refused producing; the admin grants her ACLs with confluent-kafka's
AdminClient (CreateAcls); then alice produces and consumes in a group. Every wait has a deadline and says
what it waits for; a broker applies a new ACL when its metadata image does, so alice's first allowed
produce is awaited, not assumed.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from examples.demo_waits import DemoFailure, scratch_directory, wait_for
from quorum.launcher import LocalCluster
from quorum.readiness import ClusterNotReadyError

TOPIC = "payments"
GROUP = "ledger"
MESSAGES = 20
WAIT_S = 60.0
QUIET = {"log_level": 0}
SETTINGS = {"offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0"}


def security_demo() -> None:
    print("\n== Part 9: a secured cluster: TLS, SASL (SCRAM-SHA-512) and ACLs", flush=True)
    print("$ quorum local-cluster --controllers 1 --brokers 1 --security sasl_ssl", flush=True)
    with scratch_directory("quorum-demo-security-") as directory:
        cluster = LocalCluster(directory, controllers=1, brokers=1, settings=SETTINGS, security="sasl_ssl",
                               authorizer=True)
        cluster.format_storage()
        try:
            cluster.start(timeout=WAIT_S)
            run_part(cluster)
        except ClusterNotReadyError as exc:
            raise DemoFailure(str(exc)) from None
        finally:
            cluster.stop()


def logs(cluster: LocalCluster) -> list[Path]:
    return [spec.log_path for spec in cluster.specs.values()]


def run_part(cluster: LocalCluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    for line in cluster.client_lines():
        if line.startswith(("client settings (SASL_SSL)", "admin --command-config (SASL_SSL)", "authorizer:")):
            print("  " + line, flush=True)
    wrong_password(cluster)
    admin = AdminClient(settings(cluster, "admin"))
    for future in admin.create_topics([NewTopic(TOPIC, 1, 1)], request_timeout=WAIT_S).values():
        future.result(WAIT_S)
    print(f"the admin created {TOPIC} (a super user)", flush=True)
    refused = produce(cluster, ["refused"])
    if refused != {"TOPIC_AUTHORIZATION_FAILED"}:
        raise DemoFailure(f"alice's produce to {TOPIC} before any ACL: expected TOPIC_AUTHORIZATION_FAILED, got "
                          f"{sorted(refused)}", logs(cluster))
    print(f"alice produces to {TOPIC} without ACLs: refused, TOPIC_AUTHORIZATION_FAILED", flush=True)
    grant(cluster, admin)
    values = [f"payment-{n}" for n in range(MESSAGES)]
    wait_for(f"alice's produce to {TOPIC} to be allowed (the broker applies the new ACLs with its metadata image)",
             lambda: produce(cluster, values[:1]) == {"NO_ERROR"}, WAIT_S, logs(cluster), interval_s=0.5)
    delivered = produce(cluster, values[1:])
    if delivered != {"NO_ERROR"}:
        raise DemoFailure(f"alice's produce to {TOPIC} after the ACLs: {sorted(delivered)}", logs(cluster))
    print(f"alice produced {MESSAGES} payments", flush=True)
    got = consume(cluster)
    if sorted(got) != sorted(values):
        raise DemoFailure(f"alice's group {GROUP} read {sorted(got)} from {TOPIC}, not the {MESSAGES} payments she "
                          f"wrote", logs(cluster))
    print(f"alice read all {MESSAGES} payments in group {GROUP} and committed her offsets", flush=True)


def settings(cluster: LocalCluster, user: str, **more: str) -> dict:
    return {**cluster.client_settings("SASL_SSL", user=user, mechanism="SCRAM-SHA-512"), **QUIET, **more}


def wrong_password(cluster: LocalCluster) -> None:
    """A client whose password is wrong: librdkafka reports the broker's refusal through error_cb."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    errors: list = []
    client = AdminClient(settings(cluster, "alice", **{"sasl.password": "not-her-password",
                                                      "error_cb": errors.append}))

    def refused() -> object:
        client.poll(0.5)  # serves error_cb
        return next((error for error in errors if error.code() == KafkaError._AUTHENTICATION), None)

    error = wait_for("librdkafka's authentication error for alice with a wrong password", refused, WAIT_S,
                     logs(cluster))
    print(f"alice with a wrong password: refused: {error.str()}", flush=True)


def produce(cluster: LocalCluster, values: list[str]) -> set[str]:
    """alice produces `values`; the names of the delivery errors (NO_ERROR for a delivered record)."""
    from confluent_kafka import Producer

    producer = Producer(settings(cluster, "alice", **{"message.timeout.ms": "20000"}))
    outcomes: set[str] = set()
    for value in values:
        producer.produce(TOPIC, value.encode(), on_delivery=lambda error, _: outcomes.add(
            "NO_ERROR" if error is None else error.name()))
    if producer.flush(WAIT_S):
        raise DemoFailure(f"alice's producer still had records for {TOPIC} in flight after {WAIT_S:g} s",
                          logs(cluster))
    return outcomes


def grant(cluster: LocalCluster, admin: object) -> None:
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    def allow(kind: ResourceType, name: str, operation: AclOperation) -> AclBinding:
        return AclBinding(kind, name, ResourcePatternType.LITERAL, "User:alice", "*", operation,
                          AclPermissionType.ALLOW)

    bindings = [allow(ResourceType.TOPIC, TOPIC, AclOperation.WRITE), allow(ResourceType.TOPIC, TOPIC,
                AclOperation.READ), allow(ResourceType.GROUP, GROUP, AclOperation.READ)]
    for future in admin.create_acls(bindings, request_timeout=WAIT_S).values():  # type: ignore[attr-defined]
        future.result(WAIT_S)
    print(f"the admin granted User:alice WRITE and READ on topic {TOPIC}, READ on group {GROUP} "
          f"(AdminClient.create_acls)", flush=True)


def consume(cluster: LocalCluster) -> list[str]:
    from confluent_kafka import Consumer

    consumer = Consumer(settings(cluster, "alice", **{"group.id": GROUP, "auto.offset.reset": "earliest",
                                                      "enable.auto.commit": "false",
                                                      "client.id": f"demo-{uuid.uuid4().hex[:6]}"}))
    got: list[str] = []
    try:
        consumer.subscribe([TOPIC])

        def read() -> bool:
            for message in consumer.consume(MESSAGES, 0.5):
                if message.error() is not None:
                    raise RuntimeError(f"alice's consumer of {TOPIC} in group {GROUP}: {message.error()}")
                got.append(message.value().decode())
            return len(got) >= MESSAGES

        wait_for(f"alice's group {GROUP} to read the {MESSAGES} payments of {TOPIC}", read, WAIT_S, logs(cluster))
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got
