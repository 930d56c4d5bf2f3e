"""Node configuration from a Kafka-style properties file, with Kafka's names and defaults.

Only settings this project acts on are typed; every other key is kept in `extra` so that a
properties file written for Apache Kafka loads unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from quorum.raft.interface import QuorumConfig
from quorum.wire.properties import PropertiesError, parse_properties

_VOTER = re.compile(r"^(?P<id>\d+)@(?P<host>[^:]+|\[[^\]]+\]):(?P<port>\d+)$")
_LISTENER = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)://(?P<host>[^:]*|\[[^\]]+\]):(?P<port>\d+)$")

DEFAULTS = {
    "quorum.election.timeout.ms": "1000",
    "quorum.fetch.timeout.ms": "2000",
    "quorum.election.backoff.max.ms": "1000",
    "quorum.request.timeout.ms": "2000",
    "controller.listener.names": "CONTROLLER",
    "socket.request.max.bytes": str(100 * 1024 * 1024),
    # KIP-630 (the two snapshot conditions are read by quorum.image.snapshot_policy.SnapshotPolicy)
    "replica.fetch.response.max.bytes": str(10 * 1024 * 1024),
    "metadata.start.offset.lag.time.max.ms": str(7 * 24 * 60 * 60 * 1000),
    "metadata.log.segment.bytes": str(1024 * 1024 * 1024),
    # Test only (KAFKA-6262): see NodeConfig.test_metadata_delay_ms.
    "quorum.test.metadata.delay.ms": "0",
    # KIP-232 on the wire (NodeConfig.kip232_enabled); false: the brokers answer as Apache Kafka's do.
    "quorum.kip232.enable": "true",
    # Test only: see NodeConfig.test_metadata_writes.
    "quorum.test.metadata.writes.enable": "false",
    # Diagnostics: see NodeConfig.loop_stall_ms.
    "quorum.debug.loop.stall.ms": "0",
}

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
"""Kafka's security protocols, in the order of their ids (RegisterBrokerRecord's SecurityProtocol: 0..3)."""
DEFAULT_PROTOCOL_MAP = {**{p: p for p in SECURITY_PROTOCOLS}, "CONTROLLER": "PLAINTEXT"}
"""`listener.security.protocol.map`'s default: Kafka's (each protocol maps to itself), plus CONTROLLER."""

PAUSE_METADATA = "PAUSE_METADATA"
"""Test only (KAFKA-6262): while a file of this name is in a broker's metadata log dir, its Metadata
answers stay those of the moment the file appeared (`NodeConfig.pause_metadata_path`)."""


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names the key and what was expected."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Voter:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True)
class NodeConfig:
    node_id: int
    roles: frozenset[str]
    voters: tuple[Voter, ...]
    listeners: tuple[Endpoint, ...]
    log_dirs: tuple[Path, ...]
    controller_listener_names: tuple[str, ...]
    election_timeout_ms: int
    fetch_timeout_ms: int
    election_backoff_max_ms: int
    request_timeout_ms: int
    max_frame_bytes: int
    extra: dict[str, str] = field(default_factory=dict)
    security_protocols: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_PROTOCOL_MAP))
    """`listener.security.protocol.map`: listener name -> PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."""
    advertised_listeners: tuple[Endpoint, ...] = ()
    """`advertised.listeners`: what the broker registers for clients (its `listeners` where not named)."""
    inter_broker_listener_name: str | None = None
    """`inter.broker.listener.name`: the listener brokers replicate over (the first client listener when unset)."""

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def metadata_log_dir(self) -> Path:
        """Where the `__cluster_metadata-0` partition lives: the first log dir, as Kafka's default."""
        return self.log_dirs[0] / "__cluster_metadata-0"

    def controller_endpoint(self) -> Endpoint | None:
        return next((e for e in self.listeners if e.name in self.controller_listener_names), None)

    def client_endpoint(self) -> Endpoint | None:
        """The inter-broker listener (`inter_broker_listener_name`), or the first client listener."""
        named = self.inter_broker_listener_name
        if named is not None:
            return next((e for e in self.listeners if e.name == named), None)
        return next((e for e in self.listeners if e.name not in self.controller_listener_names), None)

    def client_endpoints(self) -> tuple[Endpoint, ...]:
        """Every listener that is not a controller listener: what a broker serves clients on."""
        return tuple(e for e in self.listeners if e.name not in self.controller_listener_names)

    def served_endpoints(self) -> tuple[Endpoint, ...]:
        """What this node listens on: a controller its controller listeners, a broker its client listeners."""
        if self.is_controller:
            return tuple(e for e in self.listeners if e.name in self.controller_listener_names)
        return self.client_endpoints()

    def advertised(self, name: str) -> Endpoint | None:
        """The endpoint the broker registers for listener `name`: `advertised.listeners`' or its own."""
        own = next((e for e in self.listeners if e.name == name), None)
        return next((e for e in self.advertised_listeners if e.name == name), own)

    def security_protocol(self, listener_name: str) -> str:
        """The security protocol of listener `listener_name` (`listener.security.protocol.map`)."""
        return self.security_protocols[listener_name]

    def controller_security_protocol(self) -> str:
        """The protocol of the first controller listener name: what every node speaks to the controllers."""
        return self.security_protocols.get(self.controller_listener_names[0], "PLAINTEXT")

    def quorum(self) -> QuorumConfig:
        return QuorumConfig(
            node_id=self.node_id, voters=tuple(v.node_id for v in self.voters),
            election_timeout_ms=self.election_timeout_ms, fetch_timeout_ms=self.fetch_timeout_ms,
            election_backoff_max_ms=self.election_backoff_max_ms, request_timeout_ms=self.request_timeout_ms,
            snapshot_fetch_max_bytes=_int(self.extra, "replica.fetch.response.max.bytes"),
            start_offset_lag_time_max_ms=_int(self.extra, "metadata.start.offset.lag.time.max.ms"))

    @property
    def metadata_log_segment_bytes(self) -> int:
        return _int(self.extra, "metadata.log.segment.bytes")

    @property
    def metrics_port(self) -> int | None:
        """`quorum.metrics.port` (this project's): serve Prometheus metrics on 127.0.0.1 there; 0 picks a port."""
        value = self.extra.get("quorum.metrics.port")
        return None if value in (None, "") else _int(self.extra, "quorum.metrics.port")

    @property
    def test_metadata_delay_ms(self) -> int:
        """`quorum.test.metadata.delay.ms` (this project's, for tests only; default 0, off): a broker
        answers Metadata from the newest image it replayed at least this long ago, to reproduce a
        broker answering with old metadata (KAFKA-6262). Replay, snapshots and Raft go on as usual."""
        return _non_negative(self.extra, "quorum.test.metadata.delay.ms")

    @property
    def loop_stall_ms(self) -> int:
        """`quorum.debug.loop.stall.ms` (this project's; default 0, off): log the event loop's stack
        whenever it has not run for this long (`quorum.server.stall_watch`)."""
        return _non_negative(self.extra, "quorum.debug.loop.stall.ms")

    @property
    def kip232_enabled(self) -> bool:
        """`quorum.kip232.enable` (this project's; default true). False makes a broker answer as an
        Apache Kafka broker does, for testing the SDK against the clusters its users run: Metadata
        carries no topic epoch (tag 10232), offset records no topic epoch or topic id (Kafka's
        OffsetCommitValue v3), and no commit is refused INVALID_INTERNAL_METADATA (the internal
        metadata is a metadata string like any other). The controllers still count topic epochs in
        their own records; no client sees them."""
        return _flag(self.extra, "quorum.kip232.enable")

    @property
    def test_metadata_writes(self) -> bool:
        """`quorum.test.metadata.writes.enable` (this project's, for tests and benchmarks only; default
        false): a controller takes Produce to `__cluster_metadata` and commits the records' values
        through Raft (`quorum.admin.QuorumWriter`). Off, the controller does not serve Produce at all,
        as Kafka's controller listener does not: anyone who reaches a controller could otherwise
        write metadata records, bypassing the controller's validation and the authorizer's checks."""
        return _flag(self.extra, "quorum.test.metadata.writes.enable")

    @property
    def pause_metadata_path(self) -> Path:
        """Test only (KAFKA-6262): while this file exists, the broker's Metadata answers are paused
        (`PAUSE_METADATA` in the metadata log dir)."""
        return self.metadata_log_dir / PAUSE_METADATA


def _flag(props: dict[str, str], key: str) -> bool:
    value = props.get(key, DEFAULTS[key]).strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"{key} must be true or false, got {value!r}")
    return value == "true"


def _non_negative(props: dict[str, str], key: str) -> int:
    value = _int(props, key)
    if value < 0:
        raise ConfigError(f"{key} must be 0 or more, got {value}")
    return value


def _int(props: dict[str, str], key: str) -> int:
    value = props.get(key, DEFAULTS.get(key))
    if value is None:
        raise ConfigError(f"{key} is required")
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{key} must be an integer, got {value!r}") from None


def parse_voters(text: str) -> tuple[Voter, ...]:
    voters = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        match = _VOTER.match(item)
        if match is None:
            raise ConfigError(f"controller.quorum.voters: expected id@host:port, got {item!r}")
        voters.append(Voter(int(match["id"]), match["host"].strip("[]"), int(match["port"])))
    return tuple(voters)


def parse_listeners(text: str, key: str = "listeners") -> tuple[Endpoint, ...]:
    endpoints = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        match = _LISTENER.match(item)
        if match is None:
            raise ConfigError(f"{key}: expected NAME://host:port, got {item!r}")
        endpoints.append(Endpoint(match["name"], match["host"].strip("[]") or "0.0.0.0", int(match["port"])))
    return tuple(endpoints)


def parse_protocol_map(text: str) -> dict[str, str]:
    """`listener.security.protocol.map`: NAME:PROTOCOL,...; an unknown protocol is refused by name."""
    mapping = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or not name.strip() or protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"listener.security.protocol.map: expected NAME:PROTOCOL with PROTOCOL one of "
                              f"{', '.join(SECURITY_PROTOCOLS)}, got {item!r}")
        mapping[name.strip()] = protocol
    return mapping


def _check_listener_security(config: NodeConfig, props: dict[str, str]) -> None:
    """Every listener has a protocol; advertised and inter-broker names are listeners (Kafka's checks)."""
    for endpoint in (*config.listeners, *config.advertised_listeners):
        if endpoint.name not in config.security_protocols:
            raise ConfigError(f"listener.security.protocol.map has no security protocol for listener "
                              f"{endpoint.name!r} (NAME:PROTOCOL,...)")
    names = {e.name for e in config.listeners}
    for endpoint in config.advertised_listeners:
        if endpoint.name not in names:
            raise ConfigError(f"advertised.listeners names {endpoint.name!r}, which is not in listeners")
    named = config.inter_broker_listener_name
    if named is not None:
        if props.get("inter.broker.listener.name") and props.get("security.inter.broker.protocol"):
            raise ConfigError("only one of inter.broker.listener.name and security.inter.broker.protocol may be set")
        if config.is_broker and named not in names:
            raise ConfigError(f"inter.broker.listener.name {named!r} is not in listeners")
        if named in config.controller_listener_names:
            raise ConfigError(f"inter.broker.listener.name {named!r} is a controller listener")


def node_config(props: dict[str, str]) -> NodeConfig:
    """Validate the settings a node needs; unknown keys are kept, not refused."""
    roles = frozenset(r.strip() for r in props.get("process.roles", "").split(",") if r.strip())
    if not roles or not roles <= {"broker", "controller"}:
        raise ConfigError(f"process.roles must be broker, controller or both, got {props.get('process.roles')!r}")
    voters = parse_voters(props.get("controller.quorum.voters", ""))
    if not voters:
        raise ConfigError("controller.quorum.voters is required (id@host:port,...)")
    listeners = parse_listeners(props.get("listeners", ""))
    if not listeners:
        raise ConfigError("listeners is required (NAME://host:port,...)")
    log_dirs = tuple(Path(d.strip()) for d in props.get("log.dirs", props.get("log.dir", "")).split(",") if d.strip())
    if not log_dirs:
        raise ConfigError("log.dirs is required")
    controller_names = tuple(n.strip() for n in props.get(
        "controller.listener.names", DEFAULTS["controller.listener.names"]).split(",") if n.strip())
    config = NodeConfig(
        node_id=_int(props, "node.id"), roles=roles, voters=voters, listeners=listeners, log_dirs=log_dirs,
        controller_listener_names=controller_names,
        election_timeout_ms=_int(props, "quorum.election.timeout.ms"),
        fetch_timeout_ms=_int(props, "quorum.fetch.timeout.ms"),
        election_backoff_max_ms=_int(props, "quorum.election.backoff.max.ms"),
        request_timeout_ms=_int(props, "quorum.request.timeout.ms"),
        max_frame_bytes=_int(props, "socket.request.max.bytes"),
        extra={k: v for k, v in props.items()},
        security_protocols=(parse_protocol_map(props["listener.security.protocol.map"])
                            if "listener.security.protocol.map" in props else dict(DEFAULT_PROTOCOL_MAP)),
        advertised_listeners=parse_listeners(props.get("advertised.listeners", ""), "advertised.listeners"),
        inter_broker_listener_name=_inter_broker_listener(props),
    )
    _check_listener_security(config, props)
    if config.is_controller and config.node_id not in {v.node_id for v in voters}:
        raise ConfigError(f"node.id {config.node_id} has the controller role but is not in controller.quorum.voters")
    if config.is_controller and config.controller_endpoint() is None:
        raise ConfigError(f"listeners has no listener named in controller.listener.names {controller_names}")
    return config


def _inter_broker_listener(props: dict[str, str]) -> str | None:
    """`inter.broker.listener.name`, or the listener named by `security.inter.broker.protocol` (Kafka's
    older key, whose listener is the one named like the protocol); None when neither is set."""
    named = props.get("inter.broker.listener.name", "").strip()
    if named:
        return named
    protocol = props.get("security.inter.broker.protocol", "").strip().upper()
    if protocol and protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(f"security.inter.broker.protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, "
                          f"got {protocol!r}")
    return protocol or None


def load_config(path: str | Path, overrides: dict[str, str] | None = None) -> NodeConfig:
    try:
        props = parse_properties(Path(path).read_text(encoding="utf-8"))
    except PropertiesError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    props.update(overrides or {})
    return node_config(props)
