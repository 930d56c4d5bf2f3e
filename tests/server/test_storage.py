"""`quorum storage format` and a node started on a directory that is not formatted (a replaced disk)."""

from __future__ import annotations

from quorum.cli import main
from quorum.log.meta_properties import META_PROPERTIES_NAME, MetaProperties, write_meta_properties
from quorum.server.config import node_config
from quorum.server.storage import format_storage, read_cluster_id
from quorum.wire.properties import format_properties


def broker_properties(tmp_path) -> dict[str, str]:
    return {"node.id": "102", "process.roles": "broker", "controller.quorum.voters": "1@127.0.0.1:9093",
            "listeners": "PLAINTEXT://127.0.0.1:9092", "controller.listener.names": "CONTROLLER",
            "log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}"}


def test_a_node_started_on_a_wiped_disk_says_to_format_it_and_exits_1(tmp_path, capsys):
    config_file = tmp_path / "server.properties"
    config_file.write_text(format_properties(broker_properties(tmp_path)), encoding="utf-8")
    assert main(["start", str(config_file)]) == 1
    assert capsys.readouterr().err.strip() == (f"error: {tmp_path / 'a'} is not formatted: run `quorum storage "
                                               f"format --config FILE` first")


def test_the_cluster_id_of_a_disk_is_read_from_any_of_its_log_dirs_and_none_when_none_holds_one(tmp_path):
    config = node_config(broker_properties(tmp_path))
    assert read_cluster_id(config) is None  # nothing there at all: refused by nothing
    format_storage(config)
    assert read_cluster_id(config) is None  # formatted without an id: the first leader gives it
    write_meta_properties(tmp_path / "b" / META_PROPERTIES_NAME, MetaProperties(102, "MkU3OEVBNTcwNTJENDM2Qk"))
    assert read_cluster_id(config) == "MkU3OEVBNTcwNTJENDM2Qk"
