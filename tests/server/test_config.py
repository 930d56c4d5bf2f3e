"""Node configuration: Kafka's names, defaults and error messages that name the bad key."""

from __future__ import annotations

import pytest

from quorum.server.config import ConfigError, load_config, node_config

BASE = {
    "node.id": "2",
    "process.roles": "controller",
    "controller.quorum.voters": "1@127.0.0.1:9001,2@127.0.0.1:9002,3@127.0.0.1:9003",
    "listeners": "CONTROLLER://127.0.0.1:9002",
    "log.dirs": "/tmp/a,/tmp/b",
}


def test_kafka_defaults_apply():
    config = node_config(dict(BASE))
    assert (config.election_timeout_ms, config.fetch_timeout_ms, config.election_backoff_max_ms,
            config.request_timeout_ms) == (1000, 2000, 1000, 2000)
    assert [v.node_id for v in config.voters] == [1, 2, 3]
    assert config.controller_endpoint().port == 9002
    assert str(config.metadata_log_dir) == "/tmp/a/__cluster_metadata-0"
    assert config.quorum().voters == (1, 2, 3) and config.quorum().is_voter


def test_file_with_comments_continuations_and_overrides(tmp_path):
    path = tmp_path / "server.properties"
    text = "# a Kafka file\n" + "\n".join(f"{k}={v}" for k, v in BASE.items())
    path.write_text(text + "\nquorum.election.timeout.ms = 1500\nsome.unknown.key: kept\nlong=a\\\n  b\n")
    config = load_config(path, {"quorum.fetch.timeout.ms": "3000"})
    assert config.election_timeout_ms == 1500 and config.fetch_timeout_ms == 3000
    assert config.extra["some.unknown.key"] == "kept" and config.extra["long"] == "ab"


@pytest.mark.parametrize(("key", "value", "message"), [
    ("process.roles", "zookeeper", "process.roles"),
    ("controller.quorum.voters", "1@host", "controller.quorum.voters"),
    ("listeners", "127.0.0.1:9002", "listeners"),
    ("node.id", "seven", "node.id must be an integer"),
    ("node.id", "9", "not in controller.quorum.voters"),
    ("quorum.fetch.timeout.ms", "soon", "quorum.fetch.timeout.ms"),
])
def test_bad_settings_name_the_key(key, value, message):
    with pytest.raises(ConfigError, match=message):
        node_config({**BASE, key: value})


def test_observer_needs_no_controller_listener():
    config = node_config({**BASE, "node.id": "101", "process.roles": "broker",
                          "listeners": "PLAINTEXT://127.0.0.1:9092"})
    assert not config.is_controller and config.client_endpoint().port == 9092
    assert not config.quorum().is_voter


@pytest.mark.parametrize(("key", "setting"), [("quorum.test.metadata.delay.ms", "test_metadata_delay_ms"),
                                              ("quorum.debug.loop.stall.ms", "loop_stall_ms")])
def test_millisecond_settings_are_off_by_default_and_never_negative(key: str, setting: str) -> None:
    assert getattr(node_config(dict(BASE)), setting) == 0
    assert getattr(node_config({**BASE, key: "250"}), setting) == 250
    with pytest.raises(ConfigError, match=f"{key} must be 0 or more, got -1"):
        getattr(node_config({**BASE, key: "-1"}), setting)
