"""`client-epochs-mirror`: the replicator as a command (`python -m client_epochs.mirror.cli` too).

    client-epochs-mirror --config mm2.properties [--clusters B[,C]] [--status-interval-s S] ...
    client-epochs-mirror --source-bootstrap HOST:PORT[,..] --target-bootstrap HOST:PORT[,..] --topics t1,t2
                         [--group NAME] [--instance-id ID] [--status-interval-s S] [--stop-after-idle-s S]
                         [--give-up-after-s S]
                         [--commit-interval-s S] [--consumer-property K=V ..] [--producer-property K=V ..]

With `--config`, every enabled flow of a MirrorMaker 2 configuration file runs (`client_epochs.mirror.config`;
MM2's `--clusters` picks the flows into those clusters), each in a thread of its own; a file the
replicator cannot run (an unknown key, an MM2 key it does not implement, a pattern that is not a
regex) or a target that refuses a flow's first topic sync (no permission to create a topic) stops
it before anything is copied, with one line naming what is wrong and exit status 2. The flags of
the second form are a shorthand for one flow with IdentityReplicationPolicy and named topics.

SIGTERM and SIGINT stop it cleanly: the copies in flight are flushed, what the target acknowledged
is committed, the consumer leaves the group, and the summary is printed. Exit status 0 after a
clean stop, 1 when copying could not go on (the error is printed), 2 for bad arguments.

While it cannot copy (no group coordinator, metadata refused as stale, a partition without a
leader) its status line ends with what it waits for and for how long; past --give-up-after-s it
stops with that reason as its error (exit status 1).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import io
import logging
import re
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any

from client_epochs.connection import parse_bootstrap

_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
"""Kafka's legal topic names."""


def _bootstrap(value: str) -> str:
    try:
        parse_bootstrap(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _topics(value: str) -> list[str]:
    topics = [t.strip() for t in value.split(",") if t.strip()]
    if not topics:
        raise argparse.ArgumentTypeError(f"{value!r} names no topic")
    bad = [t for t in topics if not _TOPIC.match(t) or t in (".", "..")]
    if bad:
        raise argparse.ArgumentTypeError(f"not a Kafka topic name: {', '.join(map(repr, bad))} (letters, digits, "
                                         f"'.', '_' and '-', at most 249)")
    return topics


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not seconds > 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"{value!r} must be a positive number of seconds")
    return seconds


def _property(value: str) -> tuple[str, str]:
    key, sep, setting = value.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{value!r} is not KEY=VALUE")
    return key.strip(), setting


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="client-epochs-mirror",
        description="Copy topics from a source Kafka cluster to a target one, partition p to partition p, "
                    "committing only what the target acknowledged and never copying a record twice after a "
                    "restart (KIP-232 epoch-aware consumer; provenance headers on every copy).")
    p.add_argument("--config", default=None, metavar="MM2.PROPERTIES",
                   help="run every enabled flow of a MirrorMaker 2 configuration file (instead of the three below)")
    p.add_argument("--clusters", default=None, metavar="B[,C]",
                   help="with --config: only the flows into these clusters (MM2's --clusters)")
    p.add_argument("--source-bootstrap", type=_bootstrap, metavar="HOST:PORT[,..]")
    p.add_argument("--target-bootstrap", type=_bootstrap, metavar="HOST:PORT[,..]")
    p.add_argument("--topics", type=_topics, metavar="T1,T2", help="topics to copy")
    p.add_argument("--group", default="client-epochs-mirror", help="the source consumer group (default: %(default)s)")
    p.add_argument("--instance-id", default=None,
                   help="group.instance.id: a restarted replicator takes its partitions back at once")
    p.add_argument("--status-interval-s", type=_seconds, default=5.0, metavar="S",
                   help="print a status line every S seconds (default: %(default)g)")
    p.add_argument("--stop-after-idle-s", type=_seconds, default=None, metavar="S",
                   help="stop once the assigned partitions gave no record for S seconds")
    p.add_argument("--give-up-after-s", type=_seconds, default=300.0, metavar="S",
                   help="stop with an error once the status line has named what is missing (the group's "
                        "coordinator, current metadata, a partition's leader) for S seconds (default: %(default)g)")
    p.add_argument("--commit-interval-s", type=_seconds, default=1.0, metavar="S",
                   help="commit what the target acknowledged every S seconds (default: %(default)g)")
    p.add_argument("--consumer-property", type=_property, action="append", default=[], metavar="KEY=VALUE",
                   help="a librdkafka setting for the source consumer (repeatable)")
    p.add_argument("--producer-property", type=_property, action="append", default=[], metavar="KEY=VALUE",
                   help="a librdkafka setting for the target producer (repeatable)")
    p.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                   help="with --config: serve MM2's metrics (and the replicator's own) for Prometheus on "
                        "127.0.0.1:PORT/metrics (0: any free port, printed at start)")
    p.add_argument("-v", "--verbose", action="store_true", help="log resume decisions and refusals")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    # `kill -USR1 <pid>` prints every Python thread's stack to stderr: what a replicator that stopped
    # printing its status lines is waiting in, without stopping it. Only where stderr is a file: main()
    # called in-process (the CLI's own tests, under pytest's capture) has none to write to.
    with contextlib.suppress(io.UnsupportedOperation, ValueError):
        faulthandler.register(signal.SIGUSR1, all_threads=True)

    if args.config is None:
        missing = [flag for flag, value in (("--source-bootstrap", args.source_bootstrap),
                                            ("--target-bootstrap", args.target_bootstrap),
                                            ("--topics", args.topics)) if value is None]
        if missing:
            p.error(f"the following arguments are required without --config: {', '.join(missing)}")
    elif args.source_bootstrap or args.target_bootstrap or args.topics:
        p.error("--config names the clusters and topics: --source-bootstrap, --target-bootstrap and --topics "
                "go without it")
    elif args.clusters is not None and not args.config:
        p.error("--clusters goes with --config")

    from client_epochs.mirror import MirrorOptions, Replicator, ReplicatorError  # confluent-kafka is optional

    options = MirrorOptions(group=args.group, instance_id=args.instance_id, commit_interval_s=args.commit_interval_s,
                            status_interval_s=args.status_interval_s, stop_after_idle_s=args.stop_after_idle_s,
                            give_up_after_s=args.give_up_after_s,
                            consumer_config=dict(args.consumer_property),
                            producer_config=dict(args.producer_property))
    try:
        options.check()
    except ValueError as exc:
        p.error(str(exc))
    if args.config is not None:
        return _run_flows(args.config, args.clusters, options, args.metrics_port)
    if args.metrics_port is not None:
        p.error("--metrics-port goes with --config")
    try:
        replicator = Replicator(args.source_bootstrap, args.target_bootstrap, args.topics, options)
    except ValueError as exc:  # a source security setting its own connections cannot use, named
        p.error(str(exc))

    def stop(signum: int, _: FrameType | None) -> None:
        replicator.stop(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        replicator.run()
    except ReplicatorError as exc:
        print(f"client-epochs-mirror: error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # a client error: say what it was, without a traceback for the operator
        logging.getLogger("client_epochs.mirror").debug("stopped by", exc_info=True)
        print(f"client-epochs-mirror: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


def _run_flows(path: str, clusters: str | None, options: Any, metrics_port: int | None) -> int:
    """Every enabled flow of the file at `path`, each in a thread; 2 for a file or a target refusal
    before anything was copied, 1 when a flow stopped with an error, 0 after a clean stop."""
    from client_epochs.mirror.config import MirrorConfigError, read_config
    from client_epochs.mirror.flow import FlowRunner
    from client_epochs.mirror.metrics import MirrorMetrics, serve
    from client_epochs.mirror.topic_sync import TopicSyncRefused

    only = None if clusters is None else {c.strip() for c in clusters.split(",") if c.strip()}
    try:
        config = read_config(path, only)
        metrics = None if metrics_port is None else MirrorMetrics()
        runners = [FlowRunner(flow, options, metrics=metrics) for flow in config.flows]
        for runner in runners:
            runner.prepare()
    except (MirrorConfigError, TopicSyncRefused, ValueError) as exc:
        print(f"client-epochs-mirror: error: {exc}", file=sys.stderr)
        return 2
    if metrics is not None and metrics_port is not None:
        try:
            port = serve(metrics, metrics_port)
        except OSError as exc:
            print(f"client-epochs-mirror: error: cannot serve metrics on 127.0.0.1:{metrics_port}: {exc.strerror}",
                  file=sys.stderr)
            return 2
        print(f"client-epochs-mirror metrics: http://127.0.0.1:{port}/metrics", flush=True)

    def stop(signum: int, _: FrameType | None) -> None:
        for runner in runners:
            runner.stop(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    failures: list[str] = []

    def run(runner: FlowRunner) -> None:
        try:
            runner.run()
        except Exception as exc:  # one flow's end is said, and the others are stopped with it
            failures.append(f"flow {runner.flow.name}: {type(exc).__name__}: {exc}")
            for other in runners:
                other.stop(f"flow {runner.flow.name} failed")

    threads = [threading.Thread(target=run, args=(runner,), name=f"flow {runner.flow.name}") for runner in runners]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        for thread in threads:
            thread.join(0.2)  # short joins: the main thread takes the signals
    for failure in failures:
        print(f"client-epochs-mirror: error: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
