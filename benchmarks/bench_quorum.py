"""Three voters on loopback, fsync on: commits per second, commit latency and failover time, beside etcd 3.4.

Run: `./run bench` (all benchmarks) or `.venv/bin/python -m benchmarks.bench_quorum`.

Both systems run in the same run, one after the other, on 127.0.0.1, with their data in a temporary
directory on the project's disk (BENCH_QUORUM_DIR picks another filesystem; BENCH_QUORUM_KEEP=1
keeps the directory, with every member's log, after the run), and both fsync every commit: the
project's log always does, and etcd does by default. etcd comes from Debian's `etcd-server`
package, which this script installs (`apt-get update`, `apt-get install -y etcd-server`, through
sudo when not root) if `etcd` is not on the PATH.

Load: WRITERS concurrent writers (16, and 500 as etcd's `check perf --load l` uses), each with its
own connection, each committing sequentially for LOAD_SECONDS; "1 record" rows commit one 100-byte
record per request, "100 records" rows commit 100 of them per request (one record batch here; one
etcd transaction of 100 puts there). The quorum writers use `quorum.admin.QuorumWriter` (Produce to
`__cluster_metadata`, answered once committed); the etcd writers POST to etcd's v3 HTTP/JSON
gateway (`/v3/kv/put`, `/v3/kv/txn`). Every writer talks to the leader directly. Writers and the
three servers share this machine's cores, and both sets of writers are the same asyncio loop in
this process.

CPU per commit: the members' CPU time (user + system, from /proc, all three processes) and this
process's (the writers') over the timed part, divided by the commits: unlike records/s it does not
move with the machine's other load, so it is what an A/B of a change compares.

Failover: the leader gets SIGKILL (unplanned) or SIGTERM (graceful: the quorum's leader resigns
with EndQuorumEpoch, etcd's transfers its leadership), then a probe that commits one record is
sent to the surviving members every PROBE_INTERVAL seconds, each on a fresh connection; the time
is from the signal to the first probe that commits. The stopped member is restarted and caught
up before the next repetition; the table shows the median of REPETITIONS. On SIGTERM, etcd's
leader picks a caught-up follower and tells it to campaign at once (raft's MsgTimeoutNow), and
etcd's followers forward a put to whichever member leads; the quorum's pass a write on to the
leader too, and hold it while the leader is resigning or an election is under way
(quorum.server.quorum_handlers). Each probe asks every survivor at once and counts once one of
them has committed it. "Caught up" includes the restarted member's replay (its KIP-835
LastAppliedRecordOffset at the leader's high watermark), as a rolling restart waits for.

Floor: before the runs, a 100-byte append with fsync (and fdatasync) on the members' disk and a
loopback round trip, p50 and p99, printed under the table: what bounds a 1-record commit here.

Only some phases: BENCH_QUORUM_PHASES, a comma-separated subset of `load`, `sigkill`, `sigterm`
(all three by default), and BENCH_QUORUM_REPETITIONS failovers of each kind (3 by default); with
BENCH_QUORUM_ETCD=0 etcd is not run. Issue 37's failover goal ("every one of 10 SIGKILL failovers
<= 0.5 s") is measured by `BENCH_QUORUM_PHASES=sigkill,sigterm BENCH_QUORUM_REPETITIONS=10`.

A phase that fails (no commit within FAILOVER_LIMIT, say) is reported with the members' log tails
and marked FAILED in the table; the next phase gets a fresh cluster, and the exit status is 1.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `quorum` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.node_metrics import gauge, metrics_url  # noqa: E402
from benchmarks.table import print_table, progress  # noqa: E402
from quorum.admin import METADATA_WRITES_FOR_TESTS, QuorumStatus, QuorumWriter, describe_quorum  # noqa: E402
from quorum.launcher import LocalCluster, free_port  # noqa: E402

VOTERS = 3
WRITERS = 16
MANY_WRITERS = 500
LOADS = ((WRITERS, 1), (WRITERS, 100), (MANY_WRITERS, 1))
"""(concurrent writers, records per commit) of each load row."""
VALUE_BYTES = 100
BATCH_RECORDS = 100
LOAD_SECONDS = 10.0
BATCHED_LOAD_SECONDS = 5.0
REPETITIONS = int(os.environ.get("BENCH_QUORUM_REPETITIONS", "3"))
PHASES = frozenset(p.strip() for p in os.environ.get("BENCH_QUORUM_PHASES", "load,sigkill,sigterm").split(","))
RUN_ETCD = os.environ.get("BENCH_QUORUM_ETCD", "1") != "0"
PROBE_INTERVAL = 0.02
PROBE_TIMEOUT = 5.0
FAILOVER_LIMIT = 30.0  # seconds without a commit after which a failover counts as failed
READY_LIMIT = 60.0  # seconds for a cluster (or a restarted member) to be up and caught up
ETCD_PACKAGE = "etcd-server"


class Writer(Protocol):
    async def commit(self, values: list[bytes]) -> None: ...

    async def close(self) -> None: ...


class System(Protocol):
    """Three members of one replicated log, started and stopped by this script."""

    name: str

    def start(self) -> None: ...

    async def ready(self) -> None:
        """Return once every member is up, a leader is known and every follower has caught up."""

    async def leader(self) -> int: ...

    def writer(self, leader: int) -> Writer: ...

    async def probe(self, survivors: list[int], number: int) -> None:
        """Commit one record through `survivors` on fresh connections; raise if it did not commit."""

    def signal(self, member: int, sig: int) -> None: ...

    def wait_stopped(self, member: int, timeout: float) -> None: ...

    def restart(self, member: int) -> None: ...

    def members(self) -> list[int]: ...

    def pids(self) -> list[int]:
        """The live members' process ids (their CPU time is measured over each load)."""

    def stop(self) -> None: ...

    def diagnostics(self) -> str: ...


# ---------------------------------------------------------------------------------------------
# The project's quorum


class QuorumSystem:
    name = "quorum"

    def __init__(self, directory: Path) -> None:
        # QuorumWriter commits through Produce to __cluster_metadata: a test-only setting; the
        # metrics endpoint says when a restarted member has replayed what is committed (`ready`)
        self.cluster = LocalCluster(directory, controllers=VOTERS,
                                    settings={**METADATA_WRITES_FOR_TESTS, "quorum.metrics.port": "0"})
        self._restarted_ms: dict[int, int] = {}
        """Wall-clock ms of each member's last restart: only a fetch after it shows the member is back."""

    def members(self) -> list[int]:
        return list(self.cluster.specs)

    def pids(self) -> list[int]:
        return [self.cluster.processes[m].pid for m in self.cluster.alive()]

    def start(self) -> None:
        self.cluster.format_storage()
        self.cluster.start(wait=False)  # called on the bench's event loop: `ready()` does the waiting

    def address(self, member: int) -> str:
        return self.cluster.specs[member].address

    async def leader(self) -> int:
        return (await self._status()).leader_id

    async def _status(self) -> QuorumStatus:
        last: Exception | None = None
        for member in self.cluster.alive():
            try:
                status = await describe_quorum(self.address(member), timeout_ms=2000)
            except Exception as exc:  # not up yet, or no leader yet
                last = exc
                continue
            if status.leader_id in self.cluster.alive():
                return status
        raise RuntimeError(f"no live leader answers DescribeQuorum: {last!r}")

    async def ready(self) -> None:
        async def check() -> bool:
            status = await self._status()
            voters = [r for r in status.replicas if r.status != "Observer"]
            # A restarted member is back once the leader saw it fetch since: the fetch its previous
            # incarnation sent while stepping down (a resigned leader follows its successor until it
            # exits) looked fresh, and a SIGTERM failover then began while it was still starting, so the
            # new leader had no follower to commit with for 0.8 s (one run in ten).
            fresh = all(status.now_ms - r.last_fetch_timestamp < 3000
                        and r.last_fetch_timestamp > self._restarted_ms.get(r.node_id, -1)
                        for r in voters if r.status == "Follower")
            return (len(voters) == VOTERS and fresh and all(status.lag(r) == 0 for r in voters)
                    and all(self._applied(m) >= status.high_watermark - 1 for m in self.cluster.alive()))

        await _wait_until(check, f"{self.name}: {VOTERS} voters up, a leader, followers caught up")

    def _applied(self, member: int) -> float:
        """The member's KIP-835 LastAppliedRecordOffset. A restarted member's log can be whole at its
        first Fetch while it has not replayed it (it learns what is committed from that Fetch's
        answer): signalled then, it won the next election and replayed ~118,000 records as leader
        before it could commit a write (0.4-0.9 s), where a rolling restart waits for the replay."""
        try:
            value = gauge(metrics_url(self.cluster.specs[member].log_path),
                          "kafka_controller_KafkaController_LastAppliedRecordOffset")
        except (OSError, SystemExit):  # still starting: no endpoint named in its log yet, or not serving
            return -1
        return -1 if value is None else value

    def writer(self, leader: int) -> Writer:
        order = [leader] + [m for m in self.members() if m != leader]
        return QuorumWriter([self.address(m) for m in order], timeout_ms=30_000)

    async def probe(self, survivors: list[int], number: int) -> None:
        """Every survivor at once, one attempt each: etcd's followers and the quorum's pass a write on
        to their leader (or hold it through an election), and asking all of them at once measures
        "a new leader that can commit" without depending on which one is asked first. (Asking one after
        the other within PROBE_INTERVAL reached the second only when the first answered quickly: on
        a loaded machine the new leader went unasked for hundreds of ms.)"""
        async def attempt(member: int) -> None:
            writer = QuorumWriter([self.address(member)], timeout_ms=int(PROBE_TIMEOUT * 1000))
            try:  # a NOT_LEADER answer waits out the backoff, then the deadline has passed: one attempt
                await writer.commit([_value(number)], within_s=PROBE_INTERVAL, backoff_s=PROBE_INTERVAL)
            finally:
                await writer.close()

        tries = [asyncio.ensure_future(attempt(m)) for m in survivors]
        last: Exception = RuntimeError("no survivor to ask")
        try:
            for finished in asyncio.as_completed(tries):
                try:
                    await finished
                    return
                except Exception as exc:
                    last = exc
            raise last
        finally:
            for task in tries:
                task.cancel()
            await asyncio.gather(*tries, return_exceptions=True)

    def signal(self, member: int, sig: int) -> None:
        self.cluster.processes[member].send_signal(sig)

    def wait_stopped(self, member: int, timeout: float) -> None:
        _wait_or_kill(self.cluster.processes[member], timeout)

    def restart(self, member: int) -> None:
        self._restarted_ms[member] = int(time.time() * 1000)
        self.cluster.start_node(member)

    def stop(self) -> None:
        self.cluster.stop()

    def diagnostics(self) -> str:
        return "\n".join(_tail(spec.log_path, f"{self.name} node {spec.node_id}")
                         for spec in self.cluster.specs.values())


# ---------------------------------------------------------------------------------------------
# etcd 3.4 through its v3 HTTP/JSON gateway


class HttpConnection:
    """HTTP/1.1 keep-alive POSTs of JSON on one asyncio connection (what the etcd gateway needs)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, document: object) -> tuple[int, bytes]:
        try:
            return await self._post(path, json.dumps(document).encode())
        except BaseException:
            self.close()
            raise

    async def _post(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        assert self._reader is not None
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        self._writer.write(head + body)
        await self._writer.drain()
        status_line = await self._reader.readline()
        if not status_line:
            raise ConnectionError(f"{self.host}:{self.port} closed the connection")
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while (line := await self._reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if "content-length" in headers:
            payload = await self._reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while size := int((await self._reader.readline()).split(b";")[0], 16):
                chunks.append(await self._reader.readexactly(size))
                await self._reader.readline()
            await self._reader.readline()
            payload = b"".join(chunks)
        else:
            payload = await self._reader.read()
            headers["connection"] = "close"
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, payload

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class EtcdWriter:
    def __init__(self, host: str, port: int, name: str) -> None:
        self._connection = HttpConnection(host, port)
        self._name = name

    async def commit(self, values: list[bytes]) -> None:
        if len(values) == 1:
            await _etcd_put(self._connection, f"{self._name}/0".encode(), values[0])
            return
        puts = [{"requestPut": {"key": _b64(f"{self._name}/{i}".encode()), "value": _b64(v)}}
                for i, v in enumerate(values)]
        status, payload = await self._connection.post("/v3/kv/txn", {"success": puts})
        if status != 200:
            raise RuntimeError(f"etcd txn: HTTP {status}: {payload[:200]!r}")

    async def close(self) -> None:
        self._connection.close()


async def _etcd_put(connection: HttpConnection, key: bytes, value: bytes) -> None:
    status, payload = await connection.post("/v3/kv/put", {"key": _b64(key), "value": _b64(value)})
    if status != 200:
        raise RuntimeError(f"etcd put: HTTP {status}: {payload[:200]!r}")


@dataclass
class EtcdMember:
    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def client_url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"


class EtcdSystem:
    name = "etcd"

    def __init__(self, directory: Path, binary: str) -> None:
        self.binary = binary
        self.token = f"bench-{os.getpid()}-{int(time.time())}"
        self.etcd_members: dict[int, EtcdMember] = {}
        for n in range(1, VOTERS + 1):
            member_dir = directory / f"etcd-{n}"
            member_dir.mkdir(parents=True)
            self.etcd_members[n] = EtcdMember(f"m{n}", free_port(), free_port(), member_dir / "data",
                                              member_dir / "etcd.log")
        self.member_ids: dict[str, int] = {}  # etcd's member id (decimal string) -> our member number
        self._writers = 0

    def members(self) -> list[int]:
        return list(self.etcd_members)

    def start(self) -> None:
        for n in self.etcd_members:
            self.restart(n)

    def restart(self, member: int) -> None:
        m = self.etcd_members[member]
        initial = ",".join(f"{o.name}={o.peer_url}" for o in self.etcd_members.values())
        args = [self.binary, "--name", m.name, "--data-dir", str(m.data_dir),
                "--listen-client-urls", m.client_url, "--advertise-client-urls", m.client_url,
                "--listen-peer-urls", m.peer_url, "--initial-advertise-peer-urls", m.peer_url,
                "--initial-cluster", initial, "--initial-cluster-state", "new",
                "--initial-cluster-token", self.token, "--logger", "zap", "--log-outputs", "stderr"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("ETCD")}
        with open(m.log_path, "ab") as out:
            m.process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)

    def pids(self) -> list[int]:
        return [m.process.pid for n, m in self.etcd_members.items() if n in self.alive() and m.process is not None]

    def alive(self) -> list[int]:
        return [n for n, m in self.etcd_members.items() if m.process is not None and m.process.poll() is None]

    async def _status(self, member: int) -> dict:
        m = self.etcd_members[member]
        connection = HttpConnection("127.0.0.1", m.client_port)
        try:
            status, payload = await asyncio.wait_for(connection.post("/v3/maintenance/status", {}), 2.0)
        finally:
            connection.close()
        if status != 200:
            raise RuntimeError(f"etcd {m.name} status: HTTP {status}: {payload[:200]!r}")
        document = json.loads(payload)
        self.member_ids[document["header"]["member_id"]] = member
        return document

    async def leader(self) -> int:
        last: Exception | None = None
        for member in self.alive():
            try:
                status = await self._status(member)
            except Exception as exc:
                last = exc
                continue
            leader = self.member_ids.get(status.get("leader", "0"))
            if leader is None:  # a member we have not asked yet: ask everyone once
                for other in self.alive():
                    try:
                        await self._status(other)
                    except Exception as exc:
                        last = exc
                leader = self.member_ids.get(status.get("leader", "0"))
            if leader in self.alive():
                return leader
        raise RuntimeError(f"no live etcd leader: {last!r}")

    async def ready(self) -> None:
        async def check() -> bool:
            statuses = [await self._status(n) for n in self.members()]
            leaders = {s.get("leader") for s in statuses}
            indexes = {s.get("raftIndex", s.get("raft_index")) for s in statuses}
            return len(leaders) == 1 and "0" not in leaders and len(indexes) == 1

        await _wait_until(check, f"{self.name}: {VOTERS} members up, a leader, followers caught up")

    def writer(self, leader: int) -> Writer:
        self._writers += 1
        return EtcdWriter("127.0.0.1", self.etcd_members[leader].client_port, f"bench/w{self._writers}")

    async def probe(self, survivors: list[int], number: int) -> None:
        connection = HttpConnection("127.0.0.1", self.etcd_members[survivors[number % len(survivors)]].client_port)
        try:
            await _etcd_put(connection, b"bench/probe", _value(number))
        finally:
            connection.close()

    def signal(self, member: int, sig: int) -> None:
        process = self.etcd_members[member].process
        assert process is not None
        process.send_signal(sig)

    def wait_stopped(self, member: int, timeout: float) -> None:
        process = self.etcd_members[member].process
        assert process is not None
        _wait_or_kill(process, timeout)

    def stop(self) -> None:
        for m in self.etcd_members.values():
            if m.process is not None and m.process.poll() is None:
                m.process.terminate()
        for m in self.etcd_members.values():
            if m.process is not None:
                _wait_or_kill(m.process, 15.0)

    def diagnostics(self) -> str:
        return "\n".join(_tail(m.log_path, f"etcd {m.name}") for m in self.etcd_members.values())


def ensure_etcd() -> str:
    """The etcd binary, installed from Debian's etcd-server package first if it is missing."""
    found = shutil.which("etcd") or next((p for p in ("/usr/bin/etcd", "/usr/local/bin/etcd") if Path(p).exists()),
                                         None)
    if found:
        return found
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    if sudo and shutil.which("sudo") is None:
        raise RuntimeError(f"etcd is not installed, and installing {ETCD_PACKAGE} needs root or sudo")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for command in ([*sudo, "apt-get", "update"], [*sudo, "apt-get", "install", "-y", ETCD_PACKAGE]):
        progress(f"etcd is not installed: running `{' '.join(command)}`")
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            raise RuntimeError(f"`{' '.join(command)}` failed ({result.returncode}):\n{result.stdout[-2000:]}"
                               f"{result.stderr[-2000:]}")
    found = shutil.which("etcd") or ("/usr/bin/etcd" if Path("/usr/bin/etcd").exists() else None)
    if not found:
        raise RuntimeError(f"{ETCD_PACKAGE} is installed but no etcd binary was found")
    return found


def etcd_version(binary: str) -> str:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("etcd Version")), "?")


# ---------------------------------------------------------------------------------------------
# Measurements, the same for both systems


@dataclass
class LoadResult:
    records_per_second: float
    p50_ms: float
    p99_ms: float
    commits: int
    server_cpu_us: float = 0.0  # the members' CPU time (user + system) per commit
    client_cpu_us: float = 0.0  # this process's (the writers') CPU time per commit


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` (all its threads), from /proc; 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Results:
    loads: dict[tuple[int, int], LoadResult] = field(default_factory=dict)  # (writers, records/commit) -> result
    failovers: dict[str, list[float]] = field(default_factory=dict)  # "SIGKILL"/"SIGTERM" -> seconds
    errors: list[str] = field(default_factory=list)


def _value(number: int) -> bytes:
    return (f"{number:012d}".encode() * (VALUE_BYTES // 12 + 1))[:VALUE_BYTES]


async def _wait_until(check: Callable[[], Awaitable[bool]], what: str, limit: float = READY_LIMIT) -> None:
    deadline = time.monotonic() + limit
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if await check():
                return
        except Exception as exc:  # not up yet
            last = exc
        await asyncio.sleep(0.1)
    raise RuntimeError(f"not ready within {limit:.0f}s: {what}" + (f" (last error: {last!r})" if last else ""))


def _wait_or_kill(process: subprocess.Popen[bytes], timeout: float) -> None:
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _tail(path: Path, label: str, lines: int = 30) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
    except OSError as exc:
        return f"--- {label}: {exc}"
    return f"--- {label} ({path}), last {len(text)} lines:\n" + "\n".join(text)


async def _all(coroutines: list[Awaitable[None]], timeout: float) -> None:
    """Run them together; the first error (or the timeout) stops the rest, which are always awaited."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        done, pending = await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()  # re-raises a writer's error
        if pending:
            raise TimeoutError(f"{len(pending)} writers still waiting for a commit after {timeout:.0f}s")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def current_leader(system: System, limit: float = READY_LIMIT) -> int:
    """The member that leads, once one does: an election may be under way (the quorum's active
    controller resigns to write its snapshot when its turn comes, KIP-631's snapshot turns, which
    came as a load phase ended: the next phase, asking at once, found no leader and failed)."""
    found = -1

    async def check() -> bool:
        nonlocal found
        found = await system.leader()
        return True

    await _wait_until(check, f"{system.name}: a member that leads", limit)
    return found


async def run_load(system: System, records: int, seconds: float, concurrency: int = WRITERS) -> LoadResult:
    leader = await current_leader(system)
    writers = [system.writer(leader) for _ in range(concurrency)]
    values = [_value(i) for i in range(records)]
    latencies: list[float] = []
    try:
        await _all([w.commit(values) for w in writers], 60)  # connect and warm up
        end = time.perf_counter() + seconds

        async def write(writer: Writer) -> None:
            while time.perf_counter() < end:
                started = time.perf_counter()
                await writer.commit(values)
                latencies.append(time.perf_counter() - started)

        pids = system.pids()
        servers_before, client_before = sum(map(_cpu_seconds, pids)), time.process_time()
        start = time.perf_counter()
        await _all([write(w) for w in writers], seconds + 60)
        elapsed = time.perf_counter() - start
        server_cpu = sum(map(_cpu_seconds, pids)) - servers_before
        client_cpu = time.process_time() - client_before
    finally:
        for w in writers:
            await w.close()
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    commits = len(latencies)
    return LoadResult(commits * records / elapsed, cuts[49] * 1000, cuts[98] * 1000, commits,
                      server_cpu / commits * 1e6, client_cpu / commits * 1e6)


async def time_failover(system: System, sig: int) -> float:
    """Seconds from signalling the leader to the first probe that commits through the survivors."""
    await system.ready()
    leader = await current_leader(system)
    survivors = [m for m in system.members() if m != leader]
    probes: set[asyncio.Task[float]] = set()

    async def probe(number: int) -> float:
        await asyncio.wait_for(system.probe(survivors, number), PROBE_TIMEOUT)
        return time.perf_counter()

    started = time.perf_counter()
    system.signal(leader, sig)
    try:
        number = 0
        next_probe = started
        while (now := time.perf_counter()) - started < FAILOVER_LIMIT:
            if now >= next_probe:
                probes.add(asyncio.create_task(probe(number)))
                number += 1
                next_probe += PROBE_INTERVAL
            pause = max(0.0, next_probe - time.perf_counter())
            if not probes:
                await asyncio.sleep(pause)
                continue
            done, _ = await asyncio.wait(probes, timeout=pause, return_when=asyncio.FIRST_COMPLETED)
            committed = [t.result() for t in done if not t.cancelled() and t.exception() is None]
            probes -= done
            if committed:
                return min(committed) - started
        raise RuntimeError(f"{system.name}: no commit within {FAILOVER_LIMIT:.0f}s of {signal.Signals(sig).name} "
                           f"to leader {leader} ({number} probes sent)")
    finally:
        for task in probes:
            task.cancel()
        await asyncio.gather(*probes, return_exceptions=True)
        system.wait_stopped(leader, 30.0)
        system.restart(leader)


async def measure(name: str, make: Callable[[str], System]) -> Results:
    """Every measurement on `make`'s members; a phase that fails is reported, and the next one gets a
    fresh cluster (a new directory) so that one failure does not hide the other figures."""
    results = Results()
    clusters = 0
    system: System | None = None

    async def fresh() -> System:
        nonlocal clusters, system
        if system is not None:
            system.stop()
        clusters += 1
        system = make(f"cluster-{clusters}")
        progress(f"{name}: starting {VOTERS} members" + (f" (fresh cluster #{clusters})" if clusters > 1 else ""))
        system.start()
        await system.ready()
        return system

    async def phase(what: str, work: Callable[[System], Awaitable[None]]) -> bool:
        """False when no cluster could be started for it (then nothing else is tried)."""
        nonlocal system
        try:
            on = system if system is not None else await fresh()
        except Exception as exc:
            results.errors.append(f"{name} did not start: {exc!r}")
            print(f"!!! {name} did not start:\n{traceback.format_exc()}"
                  f"{system.diagnostics() if system is not None else ''}", file=sys.stderr, flush=True)
            return False
        try:
            await work(on)
        except Exception as exc:
            results.errors.append(f"{name} failed during {what}: {exc!r}")
            print(f"!!! {name} failed during {what}:\n{traceback.format_exc()}"
                  f"{system.diagnostics() if system is not None else ''}", file=sys.stderr, flush=True)
            system.stop()
            system = None
        return True

    def load(concurrency: int, records: int, seconds: float) -> Callable[[System], Awaitable[None]]:
        async def work(on: System) -> None:
            progress(f"{name}: {concurrency} writers x {records} record(s) per commit for {seconds:.0f}s")
            result = await run_load(on, records, seconds, concurrency)
            results.loads[concurrency, records] = result
            progress(f"{name}:   {result.records_per_second:,.0f} records/s, {result.commits:,} commits, "
                     f"p50 {result.p50_ms:.2f} ms, p99 {result.p99_ms:.2f} ms, CPU per commit: members "
                     f"{result.server_cpu_us:.0f} us, writers {result.client_cpu_us:.0f} us")
        return work

    def failovers(sig: int) -> Callable[[System], Awaitable[None]]:
        signame = signal.Signals(sig).name
        times = results.failovers.setdefault(signame, [])

        async def work(on: System) -> None:
            for repetition in range(1, REPETITIONS + 1):
                progress(f"{name}: {signame} of the leader {repetition}/{REPETITIONS} ...")
                seconds = await time_failover(on, sig)
                times.append(seconds)
                progress(f"{name}:   a commit again after {seconds:.3f}s")
        return work

    try:
        phases = [(f"load, {w} writers, {r} record(s) per commit",
                   load(w, r, LOAD_SECONDS if r == 1 else BATCHED_LOAD_SECONDS)) for w, r in LOADS if "load" in PHASES]
        phases += [(f"failover after {signal.Signals(sig).name} of the leader", failovers(sig))
                   for sig in (signal.SIGKILL, signal.SIGTERM) if signal.Signals(sig).name.lower() in PHASES]
        for what, work in phases:
            if not await phase(what, work):
                break
    finally:
        if system is not None:
            progress(f"{name}: stopping")
            system.stop()
    return results


# ---------------------------------------------------------------------------------------------


def _ratio(ours: float | None, theirs: float | None) -> str:
    if ours is None or theirs is None or theirs == 0:
        return "-"
    return f"{ours / theirs:.2f}x"


def _cell(value: float | None) -> object:
    return "-" if value is None else value


def _median(results: Results, signame: str) -> float | None:
    runs = results.failovers.get(signame, [])
    return statistics.median(runs) if len(runs) == REPETITIONS else None


def _failover_cell(results: Results, signame: str, median: float | None) -> object:
    if median is not None:
        return median
    if any(signame in error for error in results.errors):
        return f"FAILED ({len(results.failovers.get(signame, []))}/{REPETITIONS} ok)"
    return "-"


def _load_goal(records: int, metric: str, ours: float | None, theirs: float | None) -> tuple[str, str]:
    """Issue 17's goal for a load row and whether this run meets it."""
    if "load" not in PHASES:
        return "-", "not run"
    if metric == "committed records/s" and (ours is None or theirs is None):
        return "completes", "no" if ours is None else "yes"
    if ours is None or theirs is None:
        return "-", "-"
    if metric == "committed records/s":
        factor = 3.0 if records == 1 else 1.0
        return f">= {factor:g}x etcd", "yes" if ours >= factor * theirs else "no"
    if metric == "commit latency p99 (ms)" and records == 1:
        return "<= etcd", "yes" if ours <= theirs else "no"
    return "-", "-"


FAILOVER_GOALS = {"SIGKILL": 0.5, "SIGTERM": 0.02}
"""Issue 17: seconds to a commit after the leader is signalled, at default timeouts."""


def table(quorum: Results, etcd: Results, etcd_label: str) -> None:
    rows = []
    for writers, records in LOADS:
        label = f"{writers} writers, {records} record{'s' if records > 1 else ''}/commit"
        ours, theirs = quorum.loads.get((writers, records)), etcd.loads.get((writers, records))
        for metric, pick in (("committed records/s", lambda r: r.records_per_second),
                             ("commit latency p50 (ms)", lambda r: r.p50_ms),
                             ("commit latency p99 (ms)", lambda r: r.p99_ms),
                             ("server CPU per commit (us, 3 members)", lambda r: r.server_cpu_us),
                             ("client CPU per commit (us)", lambda r: r.client_cpu_us)):
            a, b = (pick(ours) if ours else None), (pick(theirs) if theirs else None)
            rows.append([f"{metric}, {label}", _cell(a), _cell(b), _ratio(a, b), *_load_goal(records, metric, a, b)])
    for name, label in (("SIGKILL", "unplanned failover, SIGKILL (s)"), ("SIGTERM", "graceful failover, SIGTERM (s)")):
        a, b = _median(quorum, name), _median(etcd, name)
        goal = FAILOVER_GOALS[name]
        rows.append([f"{label}, median of {REPETITIONS}", _failover_cell(quorum, name, a),
                     _failover_cell(etcd, name, b), _ratio(a, b), f"<= {goal:g} s",
                     "-" if a is None else ("yes" if a <= goal else "no")])
    print_table(
        f"3 voters on 127.0.0.1, fsync on ({os.cpu_count()} cores shared by clients and servers)",
        ["metric", "quorum (this project)", etcd_label, "quorum / etcd", "goal (issue 17)", "met"], rows, left=(4, 5))
    for name in ("SIGKILL", "SIGTERM"):
        each = {s: ", ".join(f"{t:.3f}" for t in r.failovers.get(name, ())) or "-"
                for s, r in (("quorum", quorum), ("etcd", etcd))}
        print(f"  {name} failover runs (s): quorum [{each['quorum']}]  etcd [{each['etcd']}]")


async def run(base: Path) -> tuple[Results, Results, str]:
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)  # clean up as on Ctrl-C
    quorum = await measure("quorum", lambda sub: QuorumSystem(base / "quorum" / sub))
    if not RUN_ETCD:
        return quorum, Results(), "etcd (not run: BENCH_QUORUM_ETCD=0)"
    try:
        binary = ensure_etcd()
    except Exception as exc:
        progress(f"etcd: unavailable: {exc}")
        return quorum, Results(errors=[f"etcd unavailable: {exc}"]), "etcd (unavailable)"
    version = etcd_version(binary)
    progress(f"etcd: {binary}, version {version}")
    etcd = await measure("etcd", lambda sub: EtcdSystem(base / "etcd" / sub, binary))
    return quorum, etcd, f"etcd {version}"


FLOOR_SAMPLES = 500


def _cuts_ms(seconds: list[float]) -> str:
    cuts = statistics.quantiles(seconds, n=100, method="inclusive")
    return f"p50 {cuts[49] * 1000:.3f} ms, p99 {cuts[98] * 1000:.3f} ms"


def floor(directory: Path) -> list[str]:
    """What bounds a 1-record commit on this machine: a 100-byte append plus fsync (and fdatasync)
    on the members' disk, and a loopback round trip. etcd's commit is leader fsync || (send,
    follower fsync, ack); the quorum's the same plus the follower's next Fetch."""
    lines = []
    for name, sync in (("fsync", os.fsync), ("fdatasync", os.fdatasync)):
        path = directory / f"floor-{name}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        times = []
        try:
            for _ in range(FLOOR_SAMPLES):
                started = time.perf_counter()
                os.write(fd, b"x" * VALUE_BYTES)
                sync(fd)
                times.append(time.perf_counter() - started)
        finally:
            os.close(fd)
            path.unlink()
        lines.append(f"{VALUE_BYTES} B append + {name} in {directory}: {_cuts_ms(times)}")
    server = socket.create_server(("127.0.0.1", 0))

    def echo() -> None:
        peer, _ = server.accept()
        with peer:
            peer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while data := peer.recv(VALUE_BYTES):
                peer.sendall(data)

    thread = threading.Thread(target=echo, daemon=True)
    thread.start()
    times = []
    with socket.create_connection(server.getsockname()) as client:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(FLOOR_SAMPLES):
            started = time.perf_counter()
            client.sendall(b"y" * VALUE_BYTES)
            client.recv(VALUE_BYTES)
            times.append(time.perf_counter() - started)
    thread.join(5)
    server.close()
    lines.append(f"loopback TCP round trip, {VALUE_BYTES} B, two threads of one process: {_cuts_ms(times)}")
    return lines


def main() -> None:
    started = time.monotonic()
    unknown = PHASES - {"load", "sigkill", "sigterm"}
    if unknown or REPETITIONS < 1:
        sys.exit(f"BENCH_QUORUM_PHASES takes load, sigkill, sigterm (not {', '.join(sorted(unknown))}); "
                 f"BENCH_QUORUM_REPETITIONS at least 1 (not {REPETITIONS})" if unknown else
                 f"BENCH_QUORUM_REPETITIONS must be at least 1, not {REPETITIONS}")
    base_dir = Path(os.environ.get("BENCH_QUORUM_DIR", "."))
    base = Path(tempfile.mkdtemp(prefix="bench-quorum-", dir=base_dir)).resolve()
    floors = floor(base)
    for line in floors:
        progress(f"floor: {line}")
    try:
        quorum, etcd, etcd_label = asyncio.run(run(base))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted: every member was stopped", file=sys.stderr)
        sys.exit(130)
    finally:
        if os.environ.get("BENCH_QUORUM_KEEP"):
            print(f"  (kept the members' directories and logs in {base})")
        else:
            shutil.rmtree(base, ignore_errors=True)
    table(quorum, etcd, etcd_label)
    for line in floors:
        print(f"  floor: {line}")
    print(f"  ({time.monotonic() - started:.0f}s in all)")
    errors = quorum.errors + etcd.errors
    for error in errors:
        print(f"  ERROR: {error}")
    if errors:
        sys.exit(1)


if __name__ == "__main__":
    main()
