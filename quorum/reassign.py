"""`quorum reassign-partitions`: move partition replicas between brokers, as Kafka's
`kafka-reassign-partitions.sh` does (KIP-455's AlterPartitionReassignments and
ListPartitionReassignments, sent to any broker, which forwards them to the active controller).

The reassignment JSON file is Kafka's:
`{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3],"log_dirs":["any","any"]}]}`
(`log_dirs` is optional; only "any" is served: this cluster does not move replicas between the log
dirs of one broker).

* `--execute` prints the current assignment of the partitions named, as JSON to save for a
  rollback, then starts the reassignments. A partition already being reassigned is refused unless
  `--additional`, as Kafka's tool does.
* `--verify` prints, per partition, "Reassignment of partition T-P is completed." or "... is still
  in progress.", and exits 1 while any is in progress or the replicas are not the ones asked for.
* `--cancel` cancels the reassignments in progress of the partitions named (back to the replicas
  each started from); `--list` prints every reassignment in progress.

Every request has a deadline (`--timeout`, default 30 s); an error names the partition or the
broker it was about.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from quorum.net.client_security import ClientSecurity
from quorum.net.peer_client import PeerClient, PeerUnavailable
from quorum.wire.errors import ErrorCode, error_name
from quorum.wire.protocol import APIS

METADATA, ALTER, LIST = APIS[3], APIS[45], APIS[46]
METADATA_VERSION, ALTER_VERSION, LIST_VERSION = 12, 0, 0


class ReassignError(RuntimeError):
    """The tool could not do what was asked; the message says what and about which partition."""


@dataclass(frozen=True, slots=True)
class Move:
    """One partition's target replicas, as the reassignment JSON file names them."""

    topic: str
    partition: int
    replicas: tuple[int, ...]

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


def parse_reassignment_json(text: str) -> list[Move]:
    """The moves of a Kafka reassignment JSON document; ReassignError naming what is wrong."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReassignError(f"the reassignment JSON is not valid JSON: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("partitions"), list):
        raise ReassignError('the reassignment JSON must be an object with a "partitions" list')
    if document.get("version", 1) != 1:
        raise ReassignError(f"unsupported reassignment JSON version {document.get('version')!r} (only 1)")
    moves: list[Move] = []
    seen: set[tuple[str, int]] = set()
    for entry in document["partitions"]:
        move = _move(entry)
        if (move.topic, move.partition) in seen:
            raise ReassignError(f"Duplicate reassignment for partition {move.name} in the reassignment JSON")
        seen.add((move.topic, move.partition))
        moves.append(move)
    if not moves:
        raise ReassignError("the reassignment JSON names no partitions")
    return moves


def _move(entry: Any) -> Move:
    if not isinstance(entry, dict):
        raise ReassignError(f"each partition of the reassignment JSON must be an object, got {entry!r}")
    topic, partition, replicas = entry.get("topic"), entry.get("partition"), entry.get("replicas")
    if not isinstance(topic, str) or not topic:
        raise ReassignError(f'a partition of the reassignment JSON has no "topic": {entry}')
    if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
        raise ReassignError(f'{topic}: "partition" must be a non-negative integer, got {partition!r}')
    name = f"{topic}-{partition}"
    if not isinstance(replicas, list) or not replicas or not all(
            isinstance(b, int) and not isinstance(b, bool) and b >= 0 for b in replicas):
        raise ReassignError(f'{name}: "replicas" must be a non-empty list of broker ids, got {replicas!r}')
    if len(set(replicas)) != len(replicas):
        raise ReassignError(f"{name}: the replicas {replicas} name a broker more than once")
    log_dirs = entry.get("log_dirs")
    if log_dirs is not None:
        if not isinstance(log_dirs, list) or len(log_dirs) != len(replicas):
            raise ReassignError(f'{name}: "log_dirs" must have one entry per replica, got {log_dirs!r}')
        if any(d != "any" for d in log_dirs):
            raise ReassignError(f'{name}: only "any" log dirs are supported (moving replicas between the log '
                                f"dirs of a broker is not), got {log_dirs}")
    return Move(topic, partition, tuple(replicas))


def format_assignment_json(moves: Iterable[Move]) -> str:
    """Kafka's reassignment JSON for these partitions and replicas, on one line as Kafka prints it."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": m.topic, "partition": m.partition, "replicas": list(m.replicas),
         "log_dirs": ["any"] * len(m.replicas)} for m in moves]}, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Ongoing:
    """A reassignment in progress, as ListPartitionReassignments reports it."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


class ReassignClient:
    """The tool's requests, to the first broker of `bootstrap` that answers."""

    def __init__(self, bootstrap: str, timeout_ms: int = 30_000, security: ClientSecurity | None = None) -> None:
        self._security = security
        self._addresses = [_address(text) for text in bootstrap.split(",") if text.strip()]
        if not self._addresses:
            raise ReassignError("--bootstrap-server names no broker")
        self._timeout_ms = timeout_ms
        self._peer: PeerClient | None = None

    async def _request(self, api: Any, version: int, body: Any) -> Any:
        if self._peer is not None:
            return await self._peer.request(api, version, body)
        failures = []
        for host, port in self._addresses:
            peer = PeerClient(host, port, "quorum-reassign-partitions", self._timeout_ms, security=self._security)
            try:
                answer = await peer.request(api, version, body)
            except PeerUnavailable as exc:
                failures.append(f"{host}:{port} ({exc})")
                await peer.close()
                continue
            self._peer = peer
            return answer
        raise ReassignError(f"no broker answered {api.name}: {', '.join(failures)}")

    async def close(self) -> None:
        if self._peer is not None:
            await self._peer.close()

    async def assignments(self, topics: Iterable[str]) -> dict[tuple[str, int], tuple[int, ...]]:
        """(topic, partition) -> replicas of every partition of `topics`; ReassignError for a topic
        that does not exist."""
        names = sorted(set(topics))
        answer = await self._request(METADATA, METADATA_VERSION, METADATA.request(
            topics=[METADATA.request.MetadataRequestTopic(name=name, topic_id=None) for name in names],
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        found: dict[tuple[str, int], tuple[int, ...]] = {}
        for topic in answer.topics:
            if topic.error_code != ErrorCode.NONE:
                raise ReassignError(f"Topic {topic.name}: {error_name(topic.error_code)}")
            for p in topic.partitions:
                found[(topic.name, p.partition_index)] = tuple(p.replica_nodes)
        return found

    async def alter(self, targets: Sequence[tuple[str, int, Sequence[int] | None]]) -> dict[tuple[str, int], str]:
        """Send AlterPartitionReassignments (None replicas: cancel); the partitions refused, with why."""
        schema = ALTER.request
        by_topic: dict[str, list[Any]] = {}
        for topic, partition, replicas in targets:
            by_topic.setdefault(topic, []).append(schema.ReassignableTopic.ReassignablePartition(
                partition_index=partition, replicas=None if replicas is None else list(replicas)))
        answer = await self._request(ALTER, ALTER_VERSION, schema(
            timeout_ms=self._timeout_ms, allow_replication_factor_change=True,
            topics=[schema.ReassignableTopic(name=name, partitions=parts) for name, parts in by_topic.items()]))
        if answer.error_code != ErrorCode.NONE:
            raise ReassignError(f"AlterPartitionReassignments: {error_name(answer.error_code)}"
                                f"{': ' + answer.error_message if answer.error_message else ''}")
        return {(t.name, p.partition_index): f"{error_name(p.error_code)}"
                                             f"{': ' + p.error_message if p.error_message else ''}"
                for t in answer.responses for p in t.partitions if p.error_code != ErrorCode.NONE}

    async def ongoing(self, partitions: Iterable[tuple[str, int]] | None = None) -> dict[tuple[str, int], Ongoing]:
        """The reassignments in progress among `partitions` (all when None)."""
        schema = LIST.request
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in partitions:
                by_topic.setdefault(topic, []).append(partition)
            topics = [schema.ListPartitionReassignmentsTopics(name=name, partition_indexes=indexes)
                      for name, indexes in by_topic.items()]
        answer = await self._request(LIST, LIST_VERSION, schema(timeout_ms=self._timeout_ms, topics=topics))
        if answer.error_code != ErrorCode.NONE:
            raise ReassignError(f"ListPartitionReassignments: {error_name(answer.error_code)}")
        return {(t.name, p.partition_index): Ongoing(t.name, p.partition_index, tuple(p.replicas),
                                                     tuple(p.adding_replicas), tuple(p.removing_replicas))
                for t in answer.topics for p in t.partitions}


async def execute(client: ReassignClient, moves: Sequence[Move], additional: bool = False) -> list[str]:
    """Start the moves; the lines to print (the rollback JSON first). ReassignError when a partition
    does not exist, one is already being reassigned (without `additional`), or the controller
    refuses one (the others named in the request still start, as with Kafka's tool)."""
    current = await client.assignments(m.topic for m in moves)
    missing = [m.name for m in moves if (m.topic, m.partition) not in current]
    if missing:
        raise ReassignError(f"Unable to find partition(s) {', '.join(missing)}")
    if not additional:
        busy = await client.ongoing((m.topic, m.partition) for m in moves)
        if busy:
            raise ReassignError("Cannot execute because there is an existing partition assignment for "
                                f"{', '.join(f'{t}-{p}' for t, p in sorted(busy))}. Use --additional to override "
                                "this and create a new partition assignment in addition to the existing one.")
    rollback = [Move(m.topic, m.partition, current[(m.topic, m.partition)]) for m in moves]
    lines = ["Current partition replica assignment", "", format_assignment_json(rollback), "",
             "Save this to use as the --reassignment-json-file option during rollback"]
    refused = await client.alter([(m.topic, m.partition, m.replicas) for m in moves])
    if refused:
        raise ReassignError("\n".join([*lines, *(f"Error reassigning partition(s): {t}-{p}: {why}"
                                                 for (t, p), why in sorted(refused.items()))]))
    lines.append(f"Successfully started partition reassignment{'s' if len(moves) > 1 else ''} for "
                 f"{','.join(m.name for m in moves)}")
    return lines


async def verify(client: ReassignClient, moves: Sequence[Move]) -> tuple[list[str], bool]:
    """The status lines of the moves, and whether every one is done with the replicas asked for."""
    ongoing = await client.ongoing((m.topic, m.partition) for m in moves)
    current = await client.assignments(m.topic for m in moves)
    lines = ["Status of partition reassignment:"]
    done = True
    for move in moves:
        replicas = current.get((move.topic, move.partition))
        if (move.topic, move.partition) in ongoing:
            lines.append(f"Reassignment of partition {move.name} is still in progress.")
            done = False
        elif replicas is None:
            lines.append(f"Partition {move.name} does not exist.")
            done = False
        elif replicas == move.replicas:
            lines.append(f"Reassignment of partition {move.name} is completed.")
        else:
            lines.append(f"There is no active reassignment of partition {move.name}, but replica set is "
                         f"{_brokers(replicas)} rather than {_brokers(move.replicas)}.")
            done = False
    return lines, done


async def cancel(client: ReassignClient, moves: Sequence[Move]) -> list[str]:
    """Cancel the reassignments in progress of the moves' partitions; the lines to print."""
    ongoing = await client.ongoing((m.topic, m.partition) for m in moves)
    active = [m for m in moves if (m.topic, m.partition) in ongoing]
    if not active:
        return ["None of the specified partition reassignments are active."]
    refused = await client.alter([(m.topic, m.partition, None) for m in active])
    if refused:
        raise ReassignError("\n".join(f"Error cancelling the reassignment of {t}-{p}: {why}"
                                      for (t, p), why in sorted(refused.items())))
    return [f"Successfully cancelled partition reassignments for: {','.join(m.name for m in active)}"]


async def list_ongoing(client: ReassignClient) -> list[str]:
    """Every reassignment in progress, as Kafka's `--list` prints them."""
    ongoing = await client.ongoing()
    if not ongoing:
        return ["No partition reassignments found."]
    return ["Current partition reassignments:", *(
        f"{o.topic}-{o.partition}: replicas: {_brokers(o.replicas)}. adding: {_brokers(o.adding)}. "
        f"removing: {_brokers(o.removing)}." for _, o in sorted(ongoing.items()))]


def run(action: str, bootstrap: str, json_text: str | None, *, additional: bool = False,
        timeout_ms: int = 30_000, security: ClientSecurity | None = None) -> tuple[list[str], int]:
    """The lines to print and the exit code of one tool run (`action`: execute, verify, cancel, list)."""
    if action != "list" and json_text is None:
        raise ReassignError(f"--{action} needs --reassignment-json-file")
    moves = parse_reassignment_json(json_text) if json_text is not None and action != "list" else []

    async def go() -> tuple[list[str], int]:
        client = ReassignClient(bootstrap, timeout_ms, security)
        try:
            if action == "execute":
                return await execute(client, moves, additional), 0
            if action == "verify":
                lines, done = await verify(client, moves)
                return lines, 0 if done else 1
            if action == "cancel":
                return await cancel(client, moves), 0
            return await list_ongoing(client), 0
        finally:
            await client.close()

    try:
        return asyncio.run(asyncio.wait_for(go(), timeout_ms / 1000 * 3))
    except TimeoutError:
        raise ReassignError(f"--{action}: no answer from {bootstrap} within {timeout_ms * 3 / 1000:.0f} s") from None
    except PeerUnavailable as exc:
        raise ReassignError(f"--{action}: {exc}") from None


def _brokers(ids: Iterable[int]) -> str:
    return ",".join(str(b) for b in ids)


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit():
        raise ReassignError(f"--bootstrap-server: expected HOST:PORT, got {text.strip()!r}")
    return host or "127.0.0.1", int(port)


__all__ = ["Move", "Ongoing", "ReassignClient", "ReassignError", "cancel", "execute", "format_assignment_json",
           "list_ongoing", "parse_reassignment_json", "run", "verify"]
