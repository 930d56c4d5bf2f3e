"""The `quorum` command."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import faulthandler
import io
import logging
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from quorum import __version__

if TYPE_CHECKING:
    from quorum.launcher import LocalCluster


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host or "127.0.0.1", int(port)


def _topic_spec(text: str) -> tuple[str, int]:
    name, sep, count = text.partition(":")
    if not name or (sep and not count.isdigit()) or (sep and int(count) < 1):
        raise argparse.ArgumentTypeError(f"expected NAME or NAME:PARTITIONS with PARTITIONS >= 1, got {text!r}")
    return name, int(count) if sep else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="quorum", description="KRaft metadata quorum and Kafka-protocol brokers")
    parser.add_argument("--version", action="version", version=f"quorum {__version__}")
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    commands = parser.add_subparsers(dest="command", required=True)

    standalone = commands.add_parser(
        "standalone", help="serve a fixed metadata image from one node (ApiVersions, Metadata)")
    standalone.add_argument("--listen", type=_host_port, default=("127.0.0.1", 9092),
                            help="HOST:PORT to listen on; port 0 picks a free one (default 127.0.0.1:9092)")
    standalone.add_argument("--node-id", type=int, default=1, help="node.id of this node (default 1)")
    standalone.add_argument("--topic", type=_topic_spec, action="append", default=[],
                            help="NAME[:PARTITIONS] to serve; repeat for more topics")
    standalone.add_argument("--cluster-id", default=None, help="cluster id (default: a new random one)")

    storage = commands.add_parser("storage", help="prepare a node's log directories")
    storage_commands = storage.add_subparsers(dest="storage_command", required=True)
    fmt = storage_commands.add_parser("format", help="format the log dirs of the node a config file describes")
    fmt.add_argument("--config", "-c", required=True, help="the node's properties file")
    fmt.add_argument("--cluster-id", "-t", default=None,
                     help="cluster id; by default the first elected leader generates it (KIP-595)")
    fmt.add_argument("--ignore-formatted", "-g", action="store_true", help="skip dirs already formatted")
    fmt.add_argument("--add-scram", "-S", action="append", default=[], metavar="MECHANISM=[name=...,password=...]",
                     help="a SCRAM credential for the bootstrap metadata, as kafka-storage.sh's "
                          "(SCRAM-SHA-256 or SCRAM-SHA-512; password=, or salt= and saltedpassword= in base64; "
                          "iterations=, 4096 by default); repeatable")

    start = commands.add_parser("start", help="run a node from its properties file until Ctrl-C or SIGTERM")
    start.add_argument("config", help="the node's properties file (node.id, process.roles, ...)")
    start.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="override a setting of the file")

    describe = commands.add_parser("describe", help="describe the metadata quorum (as kafka-metadata-quorum.sh)")
    describe.add_argument("--bootstrap-controller", required=True, metavar="HOST:PORT",
                          help="any controller of the quorum")
    _command_config(describe)
    what = describe.add_mutually_exclusive_group(required=True)
    what.add_argument("--status", action="store_true", help="leader, epoch, high watermark, voters, observers")
    what.add_argument("--replication", action="store_true", help="one row per replica with its lag")

    offsets = commands.add_parser("get-offsets",
                                  help="offsets of a topic's partitions for a time spec (as kafka-get-offsets.sh)")
    offsets.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]", help="any broker(s)")
    offsets.add_argument("--topic", required=True, help="the topic")
    _command_config(offsets)
    offsets.add_argument("--partitions", default=None, metavar="P[,P...]",
                         help="comma-separated partition numbers (default: all)")
    offsets.add_argument("--time", default="latest",
                         help="latest (-1), earliest (-2), max-timestamp (-3), earliest-local (-4), latest-tiered "
                              "(-5), earliest-pending-upload (-6), or a timestamp in ms (default latest)")

    reassign = commands.add_parser("reassign-partitions",
                                   help="move partition replicas between brokers (as kafka-reassign-partitions.sh)")
    reassign.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]", help="any broker(s)")
    _command_config(reassign)
    reassign.add_argument("--reassignment-json-file", default=None, metavar="FILE",
                          help='Kafka\'s reassignment JSON: {"version":1,"partitions":[{"topic":..,"partition":..,'
                               '"replicas":[..]}]}')
    action = reassign.add_mutually_exclusive_group(required=True)
    action.add_argument("--execute", action="store_true", help="start the reassignments (prints the rollback JSON)")
    action.add_argument("--verify", action="store_true",
                        help="print each partition's status; exit 1 while any is still in progress")
    action.add_argument("--cancel", action="store_true", help="cancel the reassignments in progress")
    action.add_argument("--list", action="store_true", help="list every reassignment in progress")
    reassign.add_argument("--additional", action="store_true",
                          help="with --execute: also when some of the partitions are being reassigned already")
    reassign.add_argument("--timeout", type=_positive_seconds, default=30.0, metavar="S",
                          help="deadline of each request, in seconds (default 30)")

    local = commands.add_parser("local-cluster", help="start controllers as real processes on 127.0.0.1")
    local.add_argument("--controllers", type=int, default=3, help="number of controllers (default 3)")
    local.add_argument("--brokers", type=int, default=0,
                       help="number of brokers (ids 101..): they register with the active controller, serve "
                            "Metadata to clients and forward admin requests (default 0)")
    local.add_argument("--dir", required=True, help="directory for the nodes' configs, logs and data")
    local.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a setting for every node")
    local.add_argument("--stale-broker", type=int, action="append", default=[], metavar="ID",
                       help="test only (KAFKA-6262): this broker answers Metadata with old leaders and epochs, "
                            "--metadata-delay-ms old; repeat for more brokers")
    local.add_argument("--metadata-delay-ms", type=int, default=None, metavar="N",
                       help="how old the Metadata answers of the --stale-broker brokers are, in ms "
                            "(sets quorum.test.metadata.delay.ms=N on them only)")
    local.add_argument("--tiered", action="store_true",
                       help="tiered storage (KIP-405) on every broker, against an embedded S3 (moto's server on "
                            "127.0.0.1, in memory: its objects go when this command stops) unless --s3-endpoint")
    local.add_argument("--s3-endpoint", default=None, metavar="URL",
                       help="with --tiered: use this S3 endpoint (MinIO, AWS) instead of the embedded one; "
                            "credentials from boto3's usual chain or --set rsm.config.storage.aws.*")
    local.add_argument("--s3-bucket", default=None, metavar="NAME",
                       help="with --tiered: the bucket (created on the embedded S3; must exist on another; "
                            "default quorum-tiered)")
    local.add_argument("--security", choices=("sasl_ssl", "ssl", "sasl_plaintext"), default=None,
                       help="issue 18: a CA, node certificates and users admin and alice (in DIR/security); "
                            "controllers on mutual TLS, brokers on SSL, SASL_SSL and SASL_PLAINTEXT (PLAIN, "
                            "SCRAM-SHA-256/512); the StandardAuthorizer on (super users: admin and the nodes; alice "
                            "may do nothing until granted ACLs); prints the client settings, this protocol's first")
    local.add_argument("--kafka-compatible", action="store_true",
                       help="brokers answer as Apache Kafka's do (quorum.kip232.enable=false): no KIP-232 topic "
                            "epoch in Metadata or offset records, no INVALID_INTERNAL_METADATA; for running the "
                            "SDK as against the clusters its users have")
    local.add_argument("--timeout", type=_positive_seconds, default=60.0, metavar="S",
                       help="give up (exit 1, naming what was not ready and the node log to read) unless the "
                            "cluster is ready within S seconds (default 60)")
    fuzz = commands.add_parser("fuzz", help="protocol fuzzing at volume: garbage frames against a local cluster "
                                            "(1 controller, 1 broker) while a real client produces and consumes")
    fuzz.add_argument("--frames", type=_positive_int, default=1_000_000, help="frames to send (default 1,000,000)")
    fuzz.add_argument("--connections", type=_positive_int, default=16,
                      help="connections at once per node and worker (default 16)")
    fuzz.add_argument("--workers", type=_positive_int, default=2, help="worker processes (default 2)")
    fuzz.add_argument("--seed", type=int, default=1, help="seed of the frames (default 1)")
    fuzz.add_argument("--hang-deadline", type=_positive_seconds, default=30.0, metavar="S",
                      help="a frame neither answered nor closed within S seconds is a hang (default 30)")
    fuzz.add_argument("--max-seconds", type=_positive_seconds, default=None, metavar="S",
                      help="stop sending after S seconds and print the table of what was sent (default: no limit)")
    fuzz.add_argument("--dir", default=None, help="directory for the cluster (default: a temporary one)")
    return parser


def _positive_int(text: str) -> int:
    if not text.replace("_", "").isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def _positive_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return seconds


def _key_values(items: list[str]) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"expected KEY=VALUE, got {item!r}")
        pairs[key.strip()] = value.strip()
    return pairs


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    if args.command == "standalone":
        from quorum.server.standalone import serve_standalone

        host, port = args.listen
        asyncio.run(serve_standalone(host, port, args.node_id, dict(args.topic), args.cluster_id))
        return 0
    if args.command == "storage":
        return _storage(args)
    if args.command == "start":
        # `kill -USR1 <pid>` prints every Python thread's stack to the node's log without stopping it:
        # where a node that went silent waits (LocalCluster.dump_stacks). Only where stderr is a file.
        with contextlib.suppress(io.UnsupportedOperation, ValueError):
            faulthandler.register(signal.SIGUSR1, all_threads=True)
        from quorum.security.authorizer import AuthorizerConfigError, authorizer_from_properties
        from quorum.server.config import load_config
        from quorum.server.node import run_node
        from quorum.server.storage import StorageError, check_storage

        config = load_config(args.config, _key_values(args.override))
        try:
            authorizer_from_properties(config.extra)  # a bad authorizer setting is named before anything starts
            check_storage(config)  # a replaced disk is formatted again first, as with kafka-storage.sh
        except (AuthorizerConfigError, StorageError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        remote = _remote_tier(config)
        return run_node(config, remote, _follower_bootstrap(config, remote))
    if args.command == "describe":
        return _describe(args)
    if args.command == "local-cluster":
        return _local_cluster(args)
    if args.command == "get-offsets":
        return _get_offsets(args)
    if args.command == "reassign-partitions":
        return _reassign_partitions(args)
    if args.command == "fuzz":
        return _fuzz(args)
    return 2


def _remote_tier(config: object) -> object | None:
    """The entry point composes the broker with `tiered_follower`'s remote tier (KIP-405) when
    `remote.log.storage.system.enable` is true; `quorum` itself never imports it."""
    properties = config.extra  # type: ignore[attr-defined]
    if properties.get("remote.log.storage.system.enable", "false").strip().lower() != "true":
        return None
    if not config.is_broker or config.is_controller:  # type: ignore[attr-defined]
        return None
    from tiered_follower.chunk_cache import ChunkCacheConfigError
    from tiered_follower.remote_log_manager import RemoteLogManager
    from tiered_follower.rlm_quota import QuotaConfigError
    from tiered_follower.s3_client import S3ConfigError

    try:
        return RemoteLogManager.from_properties(config.node_id, properties)  # type: ignore[attr-defined]
    except (S3ConfigError, QuotaConfigError, ChunkCacheConfigError) as exc:
        raise SystemExit(f"error: {exc}") from None


def _follower_bootstrap(config: object, remote: object | None) -> object | None:
    """A broker with a remote tier gets `tiered_follower`'s follower bootstrap as its replica
    fetchers' out-of-range plug-in: KIP-405's local-log-start path on OFFSET_MOVED_TO_TIERED_STORAGE,
    and KIP-1023's tiered offset for an empty replica when `follower.fetch.last.tiered.offset.enable`."""
    if remote is None:
        return None
    from tiered_follower.bootstrap_plugin import FollowerBootstrapPlugin

    return FollowerBootstrapPlugin(config.node_id, remote)  # type: ignore[attr-defined,arg-type]


def _get_offsets(args: argparse.Namespace) -> int:
    from quorum.get_offsets import GetOffsetsError, format_offsets, list_offsets, parse_time
    from quorum.net.peer_client import PeerUnavailable

    try:
        spec = parse_time(args.time)
        partitions = None if args.partitions is None else [int(p) for p in args.partitions.split(",")]
        print(format_offsets(args.topic, list_offsets(args.bootstrap_server, args.topic, partitions, spec,
                                                      security=_command_security(args))))
    except (GetOffsetsError, PeerUnavailable, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _reassign_partitions(args: argparse.Namespace) -> int:
    from quorum.reassign import ReassignError, run

    action = next(name for name in ("execute", "verify", "cancel", "list") if getattr(args, name))
    try:
        text = None
        if args.reassignment_json_file is not None:
            with open(args.reassignment_json_file, encoding="utf-8") as file:
                text = file.read()
        lines, code = run(action, args.bootstrap_server, text, additional=args.additional,
                          timeout_ms=int(args.timeout * 1000), security=_command_security(args))
    except (ReassignError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return code


def _fuzz(args: argparse.Namespace) -> int:
    from quorum.fuzz.run import Plan, format_report, run_local

    plan = Plan(args.frames, args.connections, args.workers, args.seed, args.hang_deadline, args.max_seconds)
    report = run_local(plan, args.dir, lambda line: print(line, flush=True))
    for line in format_report(report):
        print(line, flush=True)
    return 1 if report.problems() else 0


def _storage(args: argparse.Namespace) -> int:
    from quorum.server.bootstrap_metadata import BootstrapError
    from quorum.server.config import load_config
    from quorum.server.storage import StorageError, format_storage

    try:
        for line in format_storage(load_config(args.config), args.cluster_id, args.ignore_formatted, args.add_scram):
            print(line)
    except (StorageError, BootstrapError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _command_config(command: argparse.ArgumentParser) -> None:
    command.add_argument("--command-config", default=None, metavar="FILE",
                         help="client settings for a secured listener, as Kafka's tools take them (security.protocol, "
                              "ssl.ca.location, ssl.certificate.location, ssl.key.location, sasl.mechanism, "
                              "sasl.username, sasl.password)")


def _command_security(args: argparse.Namespace):  # noqa: ANN202 - quorum.net is imported only when used
    """The ClientSecurity of --command-config FILE (None without it); OSError or ValueError for a bad file."""
    if not args.command_config:
        return None
    from quorum.net.client_security import ClientSecurity
    from quorum.wire.properties import parse_properties

    with open(args.command_config, encoding="utf-8") as config:
        return ClientSecurity.of_client_properties(parse_properties(config.read()))


def _describe(args: argparse.Namespace) -> int:
    from quorum.admin import QuorumToolError, describe_quorum, format_replication, format_status
    from quorum.net.peer_client import PeerUnavailable

    try:
        security = _command_security(args)
        status = asyncio.run(describe_quorum(args.bootstrap_controller, security=security))
    except (QuorumToolError, PeerUnavailable, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(format_status(status) if args.status else format_replication(status))
    return 0


def _stale_brokers(args: argparse.Namespace) -> dict[int, int]:
    """--stale-broker ID (repeated) with --metadata-delay-ms N: {ID: N}; one without the other is an error."""
    if args.stale_broker and args.metadata_delay_ms is None:
        raise ValueError("--stale-broker needs --metadata-delay-ms N")
    if args.metadata_delay_ms is not None and not args.stale_broker:
        raise ValueError("--metadata-delay-ms applies to the --stale-broker brokers: name at least one")
    return dict.fromkeys(args.stale_broker, args.metadata_delay_ms) if args.stale_broker else {}


def _local_cluster(args: argparse.Namespace) -> int:
    from quorum.launcher import KAFKA_COMPATIBLE, LocalCluster

    if args.brokers < 0:
        print("error: --brokers must not be negative", file=sys.stderr)
        return 2
    if (args.s3_endpoint or args.s3_bucket) and not args.tiered:
        print("error: --s3-endpoint and --s3-bucket go with --tiered", file=sys.stderr)
        return 2
    embedded = None
    settings = _key_values(args.set)
    if args.kafka_compatible:
        settings = {**KAFKA_COMPATIBLE, **settings}
    if args.tiered:
        from tiered_follower.embedded_s3 import TIERED_DEV_DEFAULTS, s3_properties, start_embedded_s3

        bucket = args.s3_bucket or "quorum-tiered"
        endpoint = args.s3_endpoint
        if endpoint is None:
            embedded = start_embedded_s3()
            embedded.create_bucket(bucket)
            endpoint = embedded.endpoint_url
            print(f"embedded S3 (moto, in memory) at {endpoint}, bucket {bucket}", flush=True)
        s3 = s3_properties(endpoint, bucket, embedded_credentials=embedded is not None)
        settings = {**TIERED_DEV_DEFAULTS, **s3, **settings}
    try:
        cluster = LocalCluster(args.dir, args.controllers, args.brokers, settings,
                               stale_brokers=_stale_brokers(args), security=args.security or False,
                               authorizer=bool(args.security))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if embedded is not None:
            embedded.stop()
        return 2
    try:
        return _run_local_cluster(args, cluster)
    finally:
        if embedded is not None:
            embedded.stop()


def _run_local_cluster(args: argparse.Namespace, cluster: LocalCluster) -> int:
    import signal
    import threading

    from quorum.readiness import ClusterNotReadyError

    cluster.format_storage()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    for line in cluster.describe_lines():
        print(line, flush=True)
    print(f"starting {args.controllers} controller(s) and {args.brokers} broker(s); waiting up to "
          f"{args.timeout:g} s until they are ready", flush=True)
    try:
        cluster.start(timeout=args.timeout, progress=lambda note: print(note, flush=True))
    except ClusterNotReadyError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        cluster.stop()
        return 1
    print("press Ctrl-C to stop", flush=True)
    for line in cluster.client_lines():
        print(line, flush=True)
    print(cluster.ready_line(), flush=True)
    reported: set[int] = set()
    while not stop.wait(1.0):
        for node_id in set(cluster.specs) - set(cluster.alive()) - reported:
            reported.add(node_id)
            print(f"node {node_id} exited (see {cluster.specs[node_id].log_path})", flush=True)
    cluster.stop()
    print("all nodes stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
