"""`mm2.properties` read as MirrorMaker 2 reads it (issue 32), sans-IO: flows, overrides, cluster clients,
MM2's filters and replication policies, and every refusal naming its key."""

from __future__ import annotations

import pytest

from client_epochs.mirror.config import MirrorConfigError, parse_config, read_config
from client_epochs.mirror.filters import topic_filter
from client_epochs.mirror.policy import ReplicationPolicy, policy_for

BASE = {"clusters": "A, B", "A.bootstrap.servers": "127.0.0.1:9092", "B.bootstrap.servers": "127.0.0.1:9093",
        "A->B.enabled": "true"}


def flow(**more: str):
    (only,) = parse_config({**BASE, **more}).flows
    return only


def test_a_flow_takes_mm2s_defaults_and_the_top_level_then_its_own_settings() -> None:
    f = flow(**{"topics": "orders.*", "A->B.topics": "payments, audit-.*", "replication.factor": "3",
                "A->B.sync.group.offsets.enabled": "TRUE"})
    assert f.name == "A->B" and f.source.bootstrap == "127.0.0.1:9092" and f.target.alias == "B"
    assert f.topics("payments") and f.topics("audit-1") and not f.topics("orders-1"), "the flow's own wins"
    assert f.number("replication.factor") == 3 and f.flag("sync.group.offsets.enabled")
    assert f.number("refresh.topics.interval.seconds") == 600 and f.flag("sync.topic.configs.enabled")
    assert f.number("emit.checkpoints.interval.seconds") == 60 and not parse_config(BASE).flows[0].flag(
        "sync.group.offsets.enabled")


def test_only_enabled_flows_run_and_clusters_picks_the_targets() -> None:
    two_way = {**BASE, "B->A.enabled": "true", "C.bootstrap.servers": "127.0.0.1:9094", "clusters": "A, B, C",
               "A->C.enabled": "false"}
    assert [f.name for f in parse_config(two_way).flows] == ["A->B", "B->A"]
    assert [f.name for f in parse_config(two_way, only_targets={"A"}).flows] == ["B->A"]
    with pytest.raises(MirrorConfigError, match="no flow is enabled"):
        parse_config({**BASE, "A->B.enabled": "false"})


def test_cluster_clients_take_common_and_per_kind_settings_and_jaas_credentials() -> None:
    f = flow(**{"A.security.protocol": "SASL_SSL", "A.sasl.mechanism": "SCRAM-SHA-512",
                "A.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                      'username="alice" password="s3cr\\"et";',
                "A.consumer.fetch.min.bytes": "1", "B.producer.linger.ms": "20"})
    assert f.source.client("consumer") == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                           "sasl.username": "alice", "sasl.password": 's3cr\\"et',
                                           "fetch.min.bytes": "1"}
    assert f.source.client("admin")["sasl.username"] == "alice" and "fetch.min.bytes" not in f.source.client("admin")
    assert f.target.client("producer") == {"linger.ms": "20"}


@pytest.mark.parametrize("key, value, message", [
    ("topic", "x", "topic: unknown setting"),
    ("A->B.topcs", "x", "A->B.topcs: unknown setting"),
    ("A.bootstrap.server", "h:1", "A.bootstrap.server: unknown cluster setting"),
    ("tasks.max", "4", "tasks.max: an MM2 setting client-epochs-mirror does not implement"),
    ("A->B.use.defaults.from", "source", "does not implement"),
    ("sync.topic.acls.enabled", "true", "sync.topic.acls.enabled = true: not implemented"),
    ("topics", "orders[", "topics: 'orders\\[' is not a valid regular expression"),
    ("A->B.topics.exclude", "(x", "is not a valid regular expression"),
    ("replication.policy.class", "com.example.MyPolicy", "is not one the replicator has"),
    ("emit.checkpoints.enabled", "yes", "true or false"),
    ("replication.factor", "0", "must be 1 or more"),
    ("refresh.topics.interval.seconds", "soon", "a whole number"),
    ("A.ssl.truststore.location", "/x.jks", "Java key stores are not read"),
    ("A.sasl.jaas.config", "com.sun.security.auth.module.Krb5LoginModule required;", "only PlainLoginModule"),
    ("A->C.enabled", "true", "A->C: a flow between two different clusters"),
])
def test_every_refusal_names_its_key(key, value, message) -> None:
    with pytest.raises(MirrorConfigError, match=message):
        parse_config({**BASE, key: value})


def test_a_missing_bootstrap_and_a_value_already_true_of_the_replicator(tmp_path) -> None:
    with pytest.raises(MirrorConfigError, match="B.bootstrap.servers is required"):
        parse_config({k: v for k, v in BASE.items() if k != "B.bootstrap.servers"})
    assert flow(**{"sync.topic.acls.enabled": "false", "offset-syncs.topic.location": "source"})
    path = tmp_path / "mm2.properties"
    path.write_text("clusters = A, B\nA.bootstrap.servers = h:1\nB.bootstrap.servers = h:2\nA->B.enabled = true\n"
                    "A->B.topics = .*\\\n  , other\n")
    (read,) = read_config(path).flows
    assert read.settings["topics"] == ".*, other", "java.util.Properties continuation lines"
    path.write_text("clusters = A\nbad \\u12")
    with pytest.raises(MirrorConfigError, match="mm2.properties: malformed unicode escape"):
        read_config(path)
    with pytest.raises(MirrorConfigError, match="cannot read"):
        read_config(tmp_path / "missing.properties")


def test_mm2s_default_filters_leave_out_internal_topics() -> None:
    default = topic_filter()
    assert default("orders") and not default("__consumer_offsets") and not default("mm2-offset-syncs.B.internal")
    assert not default("orders.replica") and not default("connect-internal")
    f = flow()
    assert f.should_replicate("orders") and f.should_replicate("heartbeats")
    assert not f.should_replicate("B.orders"), "a copy of B's own topic is not copied back (cycle)"
    assert not f.should_replicate("C.B.orders") and f.should_replicate("C.orders")
    assert not f.should_replicate("A.checkpoints.internal") and not f.should_replicate("__consumer_offsets")
    assert f.target_topic("orders") == "A.orders"


def test_replication_policies_name_copies_as_mm2() -> None:
    default, identity = policy_for("DefaultReplicationPolicy"), policy_for(
        "org.apache.kafka.connect.mirror.IdentityReplicationPolicy")
    assert default.format_remote_topic("A", "orders") == "A.orders" and default.topic_source("A.orders") == "A"
    assert default.upstream_topic("B.A.orders") == "A.orders" and default.topic_source("orders") is None
    assert ReplicationPolicy("_").format_remote_topic("A", "t") == "A_t"
    assert identity.format_remote_topic("A", "orders") == "orders" and identity.topic_source("orders") is None
    assert identity.format_remote_topic("A", "heartbeats") == "A.heartbeats", "heartbeats stay apart by source"
    assert not identity.is_cycle("B.orders", "B"), "the identity policy cannot tell a copy (as MM2)"


def test_an_unsecured_oauthbearer_login_becomes_librdkafkas_unsecured_tokens() -> None:
    """Issue 33: Kafka's OAuthBearerLoginModule with its unsecured login options, as librdkafka's
    sasl.oauthbearer.config (the scope list's first character is its separator, as Kafka reads it)."""
    f = flow(**{"A.security.protocol": "SASL_SSL", "A.sasl.mechanism": "OAUTHBEARER",
                "A.sasl.jaas.config": 'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
                                      'unsecuredLoginStringClaim_sub="alice" unsecuredLoginListClaim_scope=",kafka,x" '
                                      'unsecuredLoginLifetimeSeconds="600" unsecuredLoginExtension_traceId="t1";'})
    assert f.source.client("consumer") == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": "true",
        "sasl.oauthbearer.config": "principal=alice scope=kafka,x lifeSeconds=600 extension_traceId=t1"}


@pytest.mark.parametrize("more, message", [
    ({"A.sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"},
     "A.sasl.jaas.config: OAuthBearerLoginModule needs unsecuredLoginStringClaim_sub"),
    ({"A.sasl.jaas.config": 'x.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="a" '
                            'unsecuredLoginNumberClaim_n="1";'}, "unsecuredLoginNumberClaim_n cannot be put"),
    ({"A.sasl.login.callback.handler.class": "org.example.OAuthBearerLoginCallbackHandler"},
     "A.sasl.login.callback.handler.class: Java login callbacks"),
    ({"A.sasl.mechanism": "GSSAPI"}, "A.sasl.mechanism=GSSAPI is not supported"),
    ({"A.sasl.mechanism": "OAUTHBEARER", "A.sasl.oauthbearer.method": "oidc"}, "A.sasl.oauthbearer.method=oidc"),
])
def test_oauthbearer_and_mechanism_refusals_name_their_key(more, message) -> None:
    with pytest.raises(MirrorConfigError, match=message):
        parse_config({**BASE, "A.security.protocol": "SASL_SSL", **more})
