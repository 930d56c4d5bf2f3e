"""The unit suite's slice of the soak (issue 19): one round of every fault kind, short holds, on the
real 3 + 3 source and 1 + 1 target clusters, with both producers, both consumer groups and the
replicator, then the soak's full end check. The hour-long run is `python -m benchmarks.soak`; this
keeps the harness and what it judges (nothing lost, duplicated or rewound, replicas identical, no
traceback in any node's log) from rotting between such runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks import soak

pytestmark = pytest.mark.timeout(600)


def test_one_round_of_every_fault_loses_and_rewinds_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = soak.main(["--rounds", "1", "--minutes", "8", "--fault-every-s", "2", "--hold-s", "3",
                        "--rate", "30", "--members", "1", "--dir", str(tmp_path / "soak")])
    printed = capsys.readouterr()
    table = printed.out
    assert status == 0, table + "\n".join(printed.err.splitlines()[-40:])
    assert "result: OK" in table
    kinds = ["kill -9 broker", "kill -9 controller", "SIGSTOP/SIGCONT broker", "SIGSTOP/SIGCONT controller",
             "stale broker"]
    if os.geteuid() == 0:  # the full-disk fault needs the small tmpfs that only root can mount
        kinds.append("full disk")
    for kind in kinds:
        assert _figure(table, f"fault: {kind} ") >= 1, f"no {kind!r} fault injected:\n{table}"
    assert _figure(table, "records checked at their offset") >= 1000, table
    assert _figure(table, "replicator: records copied") >= 1000, table


def _figure(table: str, row: str) -> int:
    """The first number after a row's name in the soak's table; 0 when there is no such row."""
    line = next((line.strip() for line in table.splitlines() if line.strip().startswith(row)), "")
    words = line[len(row):].split()
    return int(words[0].replace(",", "")) if words else 0
