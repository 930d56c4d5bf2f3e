"""`client-epochs-mirror`'s arguments: bad ones are refused with a clear message and exit status 2,
before anything connects; the options reach the replicator; settings its guarantees rest on
cannot be overridden."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from client_epochs.mirror import MirrorOptions, Replicator
from client_epochs.mirror.cli import main, parser

ROOT = Path(__file__).resolve().parents[2]
GOOD = ["--source-bootstrap", "127.0.0.1:9092,127.0.0.1:9093", "--target-bootstrap", "[::1]:19092",
        "--topics", "orders,payments.eu"]


def refused(capsys, *args: str) -> str:
    with pytest.raises(SystemExit) as caught:
        main(list(args))
    assert caught.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(("args", "message"), [
    (["--source-bootstrap", "nohost", "--target-bootstrap", "b:1", "--topics", "t"],
     "argument --source-bootstrap: bootstrap entry 'nohost' is not host:port"),
    (["--source-bootstrap", "a:1", "--target-bootstrap", "b:99999", "--topics", "t"],
     "argument --target-bootstrap: bootstrap entry 'b:99999' is not host:port"),
    (["--source-bootstrap", "a:1", "--target-bootstrap", "b:1", "--topics", " , "], "names no topic"),
    (["--source-bootstrap", "a:1", "--target-bootstrap", "b:1", "--topics", "ok,not ok,a/b"],
     "not a Kafka topic name: 'not ok', 'a/b'"),
    ([*GOOD, "--status-interval-s", "0"], "argument --status-interval-s: '0' must be a positive number of seconds"),
    ([*GOOD, "--stop-after-idle-s", "soon"], "argument --stop-after-idle-s: 'soon' is not a number of seconds"),
    ([*GOOD, "--commit-interval-s", "nan"], "must be a positive number of seconds"),
    ([*GOOD, "--consumer-property", "no-equals"], "'no-equals' is not KEY=VALUE"),
    ([*GOOD, "--consumer-property", "enable.auto.commit=true"],
     "consumer setting(s) enable.auto.commit cannot be changed"),
    ([*GOOD, "--producer-property", "acks=1"], "producer setting(s) acks cannot be changed"),
    (["--source-bootstrap", "a:1", "--topics", "t"],
     "the following arguments are required without --config: --target-bootstrap"),
    (["--config", "mm2.properties", *GOOD[:2]], "--source-bootstrap, --target-bootstrap and --topics go without it"),
])
def test_bad_arguments_are_refused_with_a_clear_message(capsys, args, message):
    err = refused(capsys, *args)
    assert message in err, err
    assert err.startswith("usage: client-epochs-mirror")


def test_good_arguments_parse_with_the_documented_defaults():
    args = parser().parse_args([*GOOD, "--consumer-property", "fetch.min.bytes=1", "--stop-after-idle-s", "2.5"])
    assert args.topics == ["orders", "payments.eu"]
    assert (args.group, args.instance_id, args.status_interval_s, args.commit_interval_s) == (
        "client-epochs-mirror", None, 5.0, 1.0)
    assert args.stop_after_idle_s == 2.5
    assert args.consumer_property == [("fetch.min.bytes", "1")]


def test_the_replicator_refuses_options_that_break_its_guarantees():
    with pytest.raises(ValueError, match="producer setting.s. enable.idempotence cannot be changed"):
        Replicator("a:1", "b:1", ["t"], MirrorOptions(producer_config={"enable.idempotence": False}))
    with pytest.raises(ValueError, match="commit_interval_s must be positive"):
        Replicator("a:1", "b:1", ["t"], MirrorOptions(commit_interval_s=0))
    with pytest.raises(ValueError, match="no topic"):
        Replicator("a:1", "b:1", [])


def test_the_module_runs_as_a_command():
    done = subprocess.run([sys.executable, "-m", "client_epochs.mirror.cli", "--help"], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0
    for option in ("--source-bootstrap", "--target-bootstrap", "--topics", "--group", "--status-interval-s",
                   "--stop-after-idle-s"):
        assert option in done.stdout


@pytest.mark.parametrize(("text", "message"), [
    ("clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\nA->B.enabled = true\ntopic = x\n",
     "topic: unknown setting"),
    ("clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\nA->B.enabled = true\ntasks.max = 2\n",
     "tasks.max: an MM2 setting client-epochs-mirror does not implement"),
    ("clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\nA->B.enabled = true\n"
     "A->B.topics = orders(\n", "A->B: topics: 'orders(' is not a valid regular expression"),
    ("clusters = A\nA.bootstrap.servers = \\u12zz\n", "malformed unicode escape"),
    ("", "clusters: name the clusters"),
])
def test_a_config_file_the_replicator_cannot_run_is_refused_before_anything_starts(tmp_path, capsys, text,
                                                                                   message) -> None:
    """Issue 32: one line naming the file and what is wrong, exit status 2; no client was made."""
    path = tmp_path / "mm2.properties"
    path.write_text(text)
    assert main(["--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"client-epochs-mirror: error: {path}: ") and message in err, err
    assert len(err.strip().splitlines()) == 1, err
