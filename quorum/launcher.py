"""Start nodes as real processes on 127.0.0.1, the way a user runs them: shared by tests and demos.

`quorum local-cluster` grows out of this as the quorum lands; today it starts the standalone node.
"""

from __future__ import annotations

import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from quorum.wire.properties import format_properties, parse_properties

LISTENING = re.compile(r"listening on (?P<host>[\d.]+):(?P<port>\d+)")


@dataclass
class RunningNode:
    process: subprocess.Popen[str]
    host: str
    port: int
    output: list[str]

    def wait_for_output(self, pattern: str, timeout: float = 10.0) -> str:
        """The first line matching `pattern` the node has printed, waiting for it if need be."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.output):
                if re.search(pattern, line):
                    return line
            time.sleep(0.05)
        raise AssertionError(f"no output line matches {pattern!r}:\n" + "".join(self.output[-20:]))

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def start_standalone(*topics: str, timeout: float = 30.0) -> RunningNode:
    """`quorum standalone` on a free port, returned once it prints the address it listens on."""
    args = [sys.executable, "-m", "quorum.cli", "standalone", "--listen", "127.0.0.1:0"]
    for topic in topics:
        args += ["--topic", topic]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    output: list[str] = []
    deadline = time.monotonic() + timeout
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        output.append(line)
        match = LISTENING.search(line)
        if match:
            threading.Thread(target=_drain, args=(process, output), daemon=True).start()
            return RunningNode(process, match["host"], int(match["port"]), output)
    process.kill()
    raise RuntimeError("quorum standalone did not start:\n" + "".join(output))


def _drain(process: subprocess.Popen[str], output: list[str]) -> None:
    """Keep reading the node's output so that a full pipe never blocks it, and keep it for asserts."""
    assert process.stdout is not None
    for line in process.stdout:
        output.append(line)


# ---------------------------------------------------------------------------------------------
# A local cluster of controller (and later broker) processes: `quorum local-cluster`.


STALE_METADATA_KEY = "quorum.test.metadata.delay.ms"
"""Test only (KAFKA-6262): a broker with it answers Metadata from an image at least that many ms old."""

DEV_BROKER_DEFAULTS = {"offsets.topic.replication.factor": "1", "group.initial.rebalance.delay.ms": "0"}
"""What Kafka's shipped config/server.properties sets for development clusters: a `__consumer_offsets`
that a cluster of any size can create, and consumer groups that balance at once. `settings` override them."""


DEFAULT_READY_TIMEOUT_S = 60.0
"""How long `LocalCluster.start()` waits for the cluster to be ready by default."""
MAX_PORT_MOVES = 3
"""How many times `wait_ready` moves a node whose port was taken before it could listen."""


def free_port() -> int:
    """A port free on 127.0.0.1 now, for a node that binds it later: outside the kernel's ephemeral
    range, so that no other socket's port-0 bind takes it meanwhile (`quorum.net.planned_ports`)."""
    from quorum.net.planned_ports import planned_port

    return planned_port()


@dataclass
class NodeSpec:
    node_id: int
    role: str  # "controller" or "broker"
    port: int
    directory: Path
    extra_ports: dict[str, int] = field(default_factory=dict)
    """A secured broker's other client listeners (SASL_SSL, SASL_PLAINTEXT) -> port; `port` is its first."""

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.directory / "node.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


KAFKA_COMPATIBLE = {"quorum.kip232.enable": "false"}
"""Settings of a cluster whose brokers answer as Apache Kafka's do (`local-cluster --kafka-compatible`;
`NodeConfig.kip232_enabled`): what the SDK meets on the clusters its users run."""


CLUSTERS: weakref.WeakSet[LocalCluster] = weakref.WeakSet()
"""The clusters of this process (the test suite asks their nodes for their stacks when a test fails)."""


class LocalCluster:
    """Controllers (node ids 1..N) and brokers (ids 101..) as real `quorum start` processes on 127.0.0.1.

    The directory keeps each node's configuration and data, so a cluster stopped with `stop()`
    (or Ctrl-C on `quorum local-cluster`) starts again from its logs with the same ports.

    `settings` go to every node. `stale_brokers` maps broker ids to a Metadata delay in ms: those
    brokers alone get `quorum.test.metadata.delay.ms` (test only, KAFKA-6262), so that they answer
    Metadata with old leaders and epochs while the others are current; it wins over `settings`.

    `security` (issue 18): a CA, node certificates and users in `<directory>/security`
    (`quorum.security.local_cluster`); the controllers listen on mutual TLS, each broker on SSL (its
    `port`), SASL_SSL and SASL_PLAINTEXT (`extra_ports`); `client_settings(protocol)` is what a client uses.
    `plaintext_listener` adds a PLAINTEXT listener to a secured cluster's brokers (benchmarks compare).
    `authorizer` (with `security`) turns Kafka's StandardAuthorizer on as `quorum local-cluster --security`
    does: super users `admin` and the nodes' certificates, no access for anyone else until granted.
    """

    def __init__(self, directory: str | Path, controllers: int, brokers: int = 0,
                 settings: dict[str, str] | None = None, stale_brokers: dict[int, int] | None = None,
                 security: bool | str = False, plaintext_listener: bool = False, authorizer: bool = False) -> None:
        if controllers < 1:
            raise ValueError("a cluster needs at least one controller")
        self.directory = Path(directory).resolve()
        self.security = None
        self._extra_listeners = ("SASL_SSL", "SASL_PLAINTEXT", *(("PLAINTEXT",) if plaintext_listener else ()))
        self.client_protocol = security.upper() if isinstance(security, str) else "SASL_SSL"
        """The listener `ready_line` and `client_lines` name first, for a secured cluster."""
        if security:
            from quorum.security.local_cluster import PROTOCOLS

            if self.client_protocol not in PROTOCOLS:
                raise ValueError(f"security must be one of {', '.join(p.lower() for p in PROTOCOLS)}, got {security!r}")
            from quorum.security.local_cluster import LocalSecurity  # needs `cryptography`, only here

            self.security = LocalSecurity(self.directory / "security")
        elif authorizer:
            raise ValueError("the authorizer of a local cluster goes with security (its users and certificates)")
        self.authorizer = authorizer
        self.settings = dict(settings or {})
        self.specs = self._load_or_plan(controllers, brokers)
        self.stale_brokers = dict(stale_brokers or {})
        broker_ids = sorted(n for n, spec in self.specs.items() if spec.role == "broker")
        for node_id, delay_ms in self.stale_brokers.items():
            if node_id not in broker_ids:
                raise ValueError(f"stale broker {node_id} is not a broker of this cluster (brokers: "
                                 f"{', '.join(map(str, broker_ids)) or 'none'})")
            if delay_ms < 0:
                raise ValueError(f"the metadata delay of broker {node_id} must be 0 or more, got {delay_ms}")
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self._log_starts: dict[int, int] = {}
        """Where each node's log stood when its current process started: what that process wrote."""
        CLUSTERS.add(self)

    def _load_or_plan(self, controllers: int, brokers: int) -> dict[int, NodeSpec]:
        specs: dict[int, NodeSpec] = {}
        ids = [(n, "controller") for n in range(1, controllers + 1)]
        ids += [(100 + n, "broker") for n in range(1, brokers + 1)]
        for node_id, role in ids:
            directory = self.directory / f"node-{node_id}"
            configured = _configured_ports(directory / "server.properties")
            port = next(iter(configured.values()), None) or free_port()
            extra = {}
            if self.security is not None and role == "broker":
                extra = {name: configured.get(name) or free_port() for name in self._extra_listeners}
            specs[node_id] = NodeSpec(node_id, role, port, directory, extra)
        return specs

    @property
    def voters(self) -> str:
        return ",".join(f"{s.node_id}@{s.address}" for s in self.specs.values() if s.role == "controller")

    @property
    def bootstrap_controllers(self) -> str:
        return ",".join(s.address for s in self.specs.values() if s.role == "controller")

    def properties(self, spec: NodeSpec) -> dict[str, str]:
        listener = "CONTROLLER" if spec.role == "controller" else "PLAINTEXT"
        props = {
            "node.id": str(spec.node_id),
            "process.roles": spec.role,
            "controller.quorum.voters": self.voters,
            "listeners": f"{listener}://{spec.address}",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(spec.directory / "data"),
        }
        if spec.role == "broker":
            props.update(DEV_BROKER_DEFAULTS)
        if self.security is not None:
            ports = {"CONTROLLER": spec.port} if spec.role == "controller" else {"SSL": spec.port, **spec.extra_ports}
            props.update(self.security.node_properties(spec.node_id, spec.role, ports))
            if self.authorizer:
                props.update(self.security.authorizer_properties(sorted(self.specs)))
        props.update(self.settings)
        if spec.node_id in self.stale_brokers:
            props[STALE_METADATA_KEY] = str(self.stale_brokers[spec.node_id])
        return props

    def write_configs(self) -> None:
        for spec in self.specs.values():
            spec.directory.mkdir(parents=True, exist_ok=True)
            text = format_properties(self.properties(spec), f" node {spec.node_id} of a quorum local-cluster")
            spec.config_path.write_text(text, encoding="utf-8")

    def format_storage(self, cluster_id: str | None = None) -> None:
        """Format every node's log dirs once; a directory formatted before is left as it is."""
        from quorum.server.config import node_config
        from quorum.server.storage import format_storage

        self.write_configs()
        scram = self.security.add_scram() if self.security is not None else []  # SCRAM users, bootstrapped
        for spec in self.specs.values():
            format_storage(node_config(self.properties(spec)), cluster_id, ignore_formatted=True, add_scram=scram)

    def start(self, wait: bool = True, timeout: float = DEFAULT_READY_TIMEOUT_S,
              progress: Callable[[str], None] | None = None) -> None:
        """Start every node; with `wait` (the default) return only once the cluster is ready for
        clients (see `wait_ready`), so that a script may create a replication-factor-N topic at once.
        `wait=False` returns as soon as the processes are started (tests of what happens before)."""
        self.write_configs()
        for node_id in self.specs:
            self.start_node(node_id)
        if wait:
            self.wait_ready(timeout, progress)

    def wait_ready(self, timeout: float = DEFAULT_READY_TIMEOUT_S, progress: Callable[[str], None] | None = None,
                   progress_interval_s: float = 5.0) -> None:
        """Until the quorum has a leader and every broker is registered, unfenced and answers Metadata
        listing every broker. ClusterNotReadyError naming what was still missing, and the node log to
        read, after `timeout` s or as soon as a node process exits; `progress` gets the same, every
        `progress_interval_s` s while it waits."""
        from quorum.readiness import ClusterNotReadyError, Node, check, exit_note

        def nodes(role: str) -> list[Node]:
            return [Node(s.node_id, s.address, s.log_path) for s in self.specs.values()
                    if s.role == role and s.node_id in self.processes]

        started = time.monotonic()
        next_progress = started + progress_interval_s
        moves = 0
        while True:
            exited = [(n, p.returncode) for n, p in self.processes.items() if p.poll() is not None]
            for node_id, code in exited:
                if moves < MAX_PORT_MOVES and self._port_was_taken(node_id):
                    moves += 1
                    self._move_port(node_id, progress)
                    break
                spec = self.specs[node_id]
                raise ClusterNotReadyError(exit_note(Node(node_id, spec.address, spec.log_path), code))
            security = None if self.security is None else (self.security.to_controllers(), self.security.to_brokers())
            state = check(nodes("controller"), nodes("broker"), security)
            if state.ready:
                return
            waited = time.monotonic() - started
            if waited >= timeout:
                raise ClusterNotReadyError(f"the cluster in {self.directory} was not ready after {timeout:g} s: "
                                           f"still waiting for {state.describe()}")
            if progress is not None and time.monotonic() >= next_progress:
                progress(f"waiting {waited:.0f} s for {state.describe()}")
                next_progress = time.monotonic() + progress_interval_s
            time.sleep(0.2)

    def start_node(self, node_id: int) -> None:
        spec = self.specs[node_id]
        if node_id in self.processes and self.processes[node_id].poll() is None:
            return
        with open(spec.log_path, "ab") as out:
            self._log_starts[node_id] = out.tell()
            self.processes[node_id] = subprocess.Popen(
                [sys.executable, "-m", "quorum.cli", "start", str(spec.config_path)],
                stdout=out, stderr=subprocess.STDOUT)

    def _port_was_taken(self, node_id: int) -> bool:
        """Whether the node's last process exited because another socket took its port meanwhile: ports
        are picked free when the cluster is planned, and any client's connection may take one before
        the node binds it."""
        with open(self.specs[node_id].log_path, "rb") as log:
            log.seek(self._log_starts.get(node_id, 0))
            return b"address already in use" in log.read()

    def _move_port(self, node_id: int, progress: Callable[[str], None] | None) -> None:
        """Give the node a new free port and start it again; a controller's port is in every node's
        controller.quorum.voters, so then every node starts again with the new voters."""
        spec = self.specs[node_id]
        old, spec.port = spec.port, free_port()
        if progress is not None:
            progress(f"node {node_id}: port {old} was taken before it could listen; moved to {spec.port}")
        if spec.role == "controller":
            self.stop()
        self.write_configs()
        for other in self.specs:
            self.start_node(other)

    def kill(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        process = self.processes.get(node_id)
        if process is not None and process.poll() is None:
            process.send_signal(sig)
            process.wait(30)

    def wipe(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        """A broker whose disk died: stop it with `sig` if it runs, delete its log dirs and format them
        again with the cluster id they held, as an operator replacing the disk does with `quorum storage
        format -t ID`. `start_node` then starts it with the same node id and an empty log: it registers
        as a new incarnation (the controller accepts it once the old one is fenced, by a clean shutdown
        or an expired session) and recreates its replicas from the metadata, which fetch from the leaders."""
        from quorum.server.config import node_config
        from quorum.server.storage import format_storage, read_cluster_id

        spec = self.specs[node_id]
        if spec.role != "broker":
            raise ValueError(f"node {node_id} is a {spec.role}: only a broker's disk can be wiped and rebuilt "
                             f"from its peers")
        self.kill(node_id, sig)
        config = node_config(self.properties(spec))
        cluster_id = read_cluster_id(config)
        for directory in config.log_dirs:
            shutil.rmtree(directory, ignore_errors=True)
        format_storage(config, cluster_id)

    def stop(self, timeout: float = 15.0) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in self.processes.values():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def alive(self) -> list[int]:
        return [node_id for node_id, p in self.processes.items() if p.poll() is None]

    def dump_stacks(self) -> list[int]:
        """Ask every running node for its Python threads' stacks (SIGUSR1: `quorum start` prints them to
        its log and goes on); returns the nodes asked. For a failed test's story: where each node waited.
        A node whose log does not yet say it listens is left alone (before its handler is registered,
        SIGUSR1 would end it)."""
        asked = []
        for node_id, process in self.processes.items():
            if process.poll() is not None:
                continue
            with open(self.specs[node_id].log_path, "rb") as log:
                log.seek(self._log_starts.get(node_id, 0))
                if b" listening on " not in log.read():
                    continue
            process.send_signal(signal.SIGUSR1)
            asked.append(node_id)
        return asked

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(s.address for s in self.specs.values() if s.role == "broker")

    def bootstrap(self, protocol: str) -> str:
        """A secured cluster's bootstrap servers for listener `protocol` (SSL, SASL_SSL or SASL_PLAINTEXT)."""
        return ",".join(f"127.0.0.1:{s.extra_ports.get(protocol, s.port)}" for s in self.specs.values()
                        if s.role == "broker")

    def client_settings(self, protocol: str, user: str = "alice", mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
        """librdkafka settings (bootstrap servers included) for a client of a secured cluster's `protocol` listener."""
        if self.security is None:
            raise ValueError("this local cluster was started without security")
        return {"bootstrap.servers": self.bootstrap(protocol),
                **self.security.client_settings(protocol, user, mechanism)}

    def ready_line(self) -> str:
        """The line `quorum local-cluster` prints last, once `wait_ready` returned: scripts wait for it."""
        roles = [s.role for s in self.specs.values()]
        line = f"ready: {roles.count('controller')} controllers, {roles.count('broker')} brokers; "
        if self.security is not None and self.bootstrap_servers:
            return line + f"bootstrap servers ({self.client_protocol}): {self.bootstrap(self.client_protocol)}"
        if self.bootstrap_servers:
            return line + f"bootstrap servers: {self.bootstrap_servers}"
        return line + f"bootstrap controllers: {self.bootstrap_controllers}"

    def client_lines(self) -> list[str]:
        """A secured cluster's client settings: per listener, alice's and the admin's in librdkafka's and
        kafka-python's names and the admin's `--command-config` file; then the CA, users and authorizer."""
        if self.security is None or not self.bootstrap_servers:
            return []
        from quorum.security.local_cluster import OAUTH_SCOPE, PROTOCOLS

        def joined(settings: dict[str, str]) -> str:
            return " ".join(f"{key}={value}" for key, value in settings.items())

        lines = []
        for protocol in [self.client_protocol, *(p for p in PROTOCOLS if p != self.client_protocol)]:
            mechanism = "SCRAM-SHA-512" if protocol == "SASL_SSL" else "PLAIN"
            for user, label in (("alice", "client"), ("admin", "admin")):
                if protocol == "SSL" and user == "admin":
                    continue  # no SASL on SSL: the admin is the tools' certificate (the command config)
                librdkafka = self.client_settings(protocol, user, mechanism)
                lines.append(f"{label} settings ({protocol}): {joined(librdkafka)}")
                python = {"bootstrap_servers": self.bootstrap(protocol),
                          **self.security.kafka_python_settings(protocol, user, mechanism)}
                lines.append(f"{label} kafka-python ({protocol}): {joined(python)}")
            if protocol.startswith("SASL"):  # librdkafka's unsecured tokens; kafka-python's token provider
                oauth = self.client_settings(protocol, "alice", "OAUTHBEARER")
                lines.append(f"client oauthbearer ({protocol}): "
                             + " ".join(shlex.quote(f"{key}={value}") for key, value in oauth.items()))
                lines.append(f"client oauthbearer kafka-python ({protocol}): bootstrap_servers="
                             f"{self.bootstrap(protocol)} {self.security.kafka_python_oauth_line(protocol)}")
            lines.append(f"admin --command-config ({protocol}): {self.security.command_config(protocol)}")
        lines.append(f"users: {', '.join(self.security.passwords)} (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512); "
                     f"OAUTHBEARER: Kafka's unsecured tokens (alg none, scope {OAUTH_SCOPE} required), any principal "
                     f"may be claimed, for development only; CA "
                     f"{self.security.ca.cert_path}; controllers on mutual TLS (tools' certificate "
                     f"{self.security.tool})")
        if self.authorizer:
            lines.append("authorizer: StandardAuthorizer, allow.everyone.if.no.acl.found=false; super users: admin, "
                         "the nodes' and tools' certificates; alice (and an SSL client without a certificate, "
                         "User:ANONYMOUS) may do nothing until granted ACLs")
        return lines

    def describe_lines(self) -> list[str]:
        lines = [f"{s.role:<10} node {s.node_id:<4} {s.address}   config {s.config_path}   log {s.log_path}"
                 for s in self.specs.values()]
        lines.append(f"bootstrap controllers: {self.bootstrap_controllers}")
        lines += [f"stale broker {node_id}: Metadata answers at least {delay_ms} ms old (test only)"
                  for node_id, delay_ms in sorted(self.stale_brokers.items())]
        return lines  # the bootstrap servers come with the ready line, once clients can use them


def _configured_ports(path: Path) -> dict[str, int]:
    """The ports a node was given before (listener name -> port, its first listener first), so a
    restarted local cluster keeps its addresses."""
    if not path.exists():
        return {}
    listeners = parse_properties(path.read_text(encoding="utf-8")).get("listeners", "")
    return {match[1]: int(match[2]) for match in re.finditer(r"(\w+)://[^:,]*:(\d+)", listeners)}
