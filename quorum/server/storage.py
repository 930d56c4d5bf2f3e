"""`quorum storage format`: prepare a node's directories before its first start, as kafka-storage.sh does.

The cluster id is optional: without one, the first elected leader generates it (KIP-595, cluster
bootstrapping) and each node writes `meta.properties` once it knows the id is committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from quorum.log.meta_properties import META_PROPERTIES_NAME, MetaProperties, read_meta_properties, write_meta_properties
from quorum.server.bootstrap_metadata import bootstrap_records, parse_add_scram, write_bootstrap
from quorum.server.config import NodeConfig


class StorageError(RuntimeError):
    """A directory is not formatted, or formatted for another node or cluster."""


def format_storage(config: NodeConfig, cluster_id: str | None = None, ignore_formatted: bool = False,
                   add_scram: Sequence[str] = ()) -> list[str]:
    """Create every log dir; write meta.properties when the cluster id is given, and the bootstrap
    metadata (`quorum.server.bootstrap_metadata`) with the `--add-scram` credentials when there are
    some. Returns what was done. A bad `--add-scram` raises BootstrapError before anything is written."""
    scram = [parse_add_scram(text) for text in add_scram]
    done = []
    for directory in config.log_dirs:
        meta_path = directory / META_PROPERTIES_NAME
        existing = read_meta_properties(meta_path)
        if existing is not None or (directory / ".formatted").exists():
            if ignore_formatted:
                done.append(f"{directory}: already formatted")
                continue
            raise StorageError(f"{directory} is already formatted (use --ignore-formatted to skip it)")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / ".formatted").write_text(f"node.id={config.node_id}\n", encoding="utf-8")
        if cluster_id is not None:
            write_meta_properties(meta_path, MetaProperties(config.node_id, cluster_id))
        if scram and directory == config.log_dirs[0]:  # the metadata log dir, as Kafka's bootstrap.checkpoint
            done.append(f"{write_bootstrap(directory, bootstrap_records(scram))}: {len(scram)} SCRAM credentials")
        done.append(f"{directory}: formatted for node {config.node_id}"
                    + (f", cluster {cluster_id}" if cluster_id else ", cluster id from the first leader"))
    return done


def check_storage(config: NodeConfig) -> str | None:
    """The cluster id in meta.properties (None before the first leader's is committed); refuses bad dirs."""
    cluster_ids = set()
    for directory in config.log_dirs:
        meta = read_meta_properties(directory / META_PROPERTIES_NAME)
        if meta is None and not (directory / ".formatted").exists():
            raise StorageError(f"{directory} is not formatted: run `quorum storage format --config FILE` first")
        if meta is not None:
            if meta.node_id != config.node_id:
                raise StorageError(f"{directory / META_PROPERTIES_NAME} is for node {meta.node_id}, "
                                   f"not node.id {config.node_id}")
            cluster_ids.add(meta.cluster_id)
    if len(cluster_ids) > 1:
        raise StorageError(f"log dirs disagree on the cluster id: {sorted(cluster_ids)}")
    return cluster_ids.pop() if cluster_ids else None


def read_cluster_id(config: NodeConfig) -> str | None:
    """The cluster id the node's log dirs name, if any does: what a disk being replaced was formatted
    with. Unlike `check_storage` it refuses nothing (a missing or half-deleted directory is None)."""
    for directory in config.log_dirs:
        meta = read_meta_properties(directory / META_PROPERTIES_NAME)
        if meta is not None:
            return meta.cluster_id
    return None


def record_cluster_id(config: NodeConfig, cluster_id: str) -> None:
    """Write meta.properties in every log dir once the cluster id is known to be committed."""
    for directory in config.log_dirs:
        path = Path(directory) / META_PROPERTIES_NAME
        existing = read_meta_properties(path)
        if existing is None or existing.cluster_id != cluster_id:
            write_meta_properties(path, MetaProperties(config.node_id, cluster_id))
