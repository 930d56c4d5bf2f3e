"""`quorum local-cluster --stale-broker ID --metadata-delay-ms N` and LocalCluster(stale_brokers=...):
the KAFKA-6262 test knob lands on the named brokers only. No process is started."""

from __future__ import annotations

from pathlib import Path

import pytest

from quorum import cli
from quorum.launcher import STALE_METADATA_KEY, LocalCluster


def test_only_the_stale_broker_gets_the_delay(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, 1, 3, {"num.partitions": "2"}, stale_brokers={102: 5000})
    props = {node_id: cluster.properties(spec) for node_id, spec in cluster.specs.items()}
    assert props[102][STALE_METADATA_KEY] == "5000"
    assert all(STALE_METADATA_KEY not in props[n] for n in (1, 101, 103))
    assert props[102]["num.partitions"] == "2"  # the settings for every node are still there
    assert any("stale broker 102" in line for line in cluster.describe_lines())


def test_the_per_broker_knob_wins_over_the_settings(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, 1, 2, {STALE_METADATA_KEY: "0"}, stale_brokers={101: 700})
    assert cluster.properties(cluster.specs[101])[STALE_METADATA_KEY] == "700"
    assert cluster.properties(cluster.specs[102])[STALE_METADATA_KEY] == "0"


def test_the_written_config_holds_it(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, 1, 2, stale_brokers={102: 250})
    cluster.write_configs()
    from quorum.server.config import load_config

    assert load_config(str(cluster.specs[102].config_path)).test_metadata_delay_ms == 250
    assert load_config(str(cluster.specs[101].config_path)).test_metadata_delay_ms == 0


@pytest.mark.parametrize("stale", [{1: 100}, {104: 100}, {101: -1}])
def test_refused(tmp_path: Path, stale: dict[int, int]) -> None:
    with pytest.raises(ValueError):
        LocalCluster(tmp_path, 1, 3, stale_brokers=stale)


def test_cli_options(tmp_path: Path) -> None:
    parser = cli.build_parser()
    args = parser.parse_args(["local-cluster", "--dir", str(tmp_path), "--brokers", "3", "--stale-broker", "102",
                              "--stale-broker", "103", "--metadata-delay-ms", "4000"])
    assert cli._stale_brokers(args) == {102: 4000, 103: 4000}
    none = parser.parse_args(["local-cluster", "--dir", str(tmp_path)])
    assert cli._stale_brokers(none) == {}
    for argv in (["--stale-broker", "102"], ["--metadata-delay-ms", "10"]):
        with pytest.raises(ValueError):
            cli._stale_brokers(parser.parse_args(["local-cluster", "--dir", str(tmp_path), *argv]))


def test_cli_refuses_a_stale_controller_before_starting_anything(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["local-cluster", "--dir", str(tmp_path), "--controllers", "1", "--brokers", "1",
                     "--stale-broker", "1", "--metadata-delay-ms", "10"])
    assert code == 2
    assert "not a broker" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing formatted, nothing started


@pytest.mark.parametrize("timeout", ["0", "-5", "soon", "inf"])
def test_a_timeout_that_is_not_a_positive_number_of_seconds_is_refused(tmp_path: Path, timeout: str,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["local-cluster", "--dir", str(tmp_path), "--timeout", timeout])
    assert exited.value.code == 2
    assert "--timeout" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
