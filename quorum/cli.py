"""The `quorum` command."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from quorum import __version__


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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    if args.command == "standalone":
        from quorum.server.standalone import serve_standalone

        host, port = args.listen
        asyncio.run(serve_standalone(host, port, args.node_id, dict(args.topic), args.cluster_id))
    return 0


if __name__ == "__main__":
    sys.exit(main())
