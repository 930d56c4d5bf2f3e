"""Deleting partition directories as Kafka's LogManager does: renamed first, removed afterwards.

A partition directory is renamed to `<topic>-<partition>.<uuid>-delete` (`delete_dir_name`) and the
rename made durable; only then are its files removed. A crash in between leaves a `-delete`
directory that the next start removes (`ReplicaManager`'s scan), never a torn log that would be
loaded again. The removal is the slow part (a few hundred microseconds a directory, seconds for a
topic of thousands of partitions), so `LogDeleter` does it on a thread of its own, as Kafka's
`LogManager.asyncDelete` leaves it to its scheduler: a broker deleting a big topic keeps serving.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from quorum.log.atomic import fsync_directory

logger = logging.getLogger(__name__)

DELETE_SUFFIX = "-delete"
MAX_DIR_NAME_BYTES = 255
"""The longest file name Linux file systems take (NAME_MAX)."""


def delete_dir_name(directory_name: str, unique_id: str) -> str:
    """`<topic>-<partition>.<unique_id>-delete` for the partition directory `<topic>-<partition>`, with the
    topic cut short so that the name fits MAX_DIR_NAME_BYTES, as Kafka's logDirNameWithSuffixCappedLength:
    a legal topic of 249 characters otherwise gave a name the rename refused, and the topic's
    partitions could never be deleted. Topic names are ASCII, so characters are bytes."""
    topic, _, partition = directory_name.rpartition("-")
    suffix = f"-{partition}.{unique_id}{DELETE_SUFFIX}"
    return topic[:MAX_DIR_NAME_BYTES - len(suffix)] + suffix


def rename_for_deletion(directories: Iterable[Path]) -> list[Path]:
    """Rename each of `directories` to its `-delete` name, then fsync each parent once (one fsync per
    log dir, not per partition); returns the new names, for `remove_renamed`. A directory that cannot
    be renamed is logged and left where it is."""
    renamed: list[Path] = []
    parents: set[Path] = set()
    for directory in directories:
        doomed = directory.with_name(delete_dir_name(directory.name, uuid.uuid4().hex))
        try:
            directory.rename(doomed)
        except OSError as exc:
            logger.error("%s: could not delete: %s", directory, exc)
            continue
        renamed.append(doomed)
        parents.add(directory.parent)
    for parent in parents:
        fsync_directory(parent)
    return renamed


def remove_renamed(doomed: Path) -> None:
    """Remove a directory `rename_for_deletion` renamed; what cannot be removed is left for the next start."""
    shutil.rmtree(doomed, ignore_errors=True)
    logger.info("%s: deleted", doomed)


def delete_partition_dir(directory: Path) -> None:
    """Rename `directory` for deletion, durably, and remove it, all on the caller's thread."""
    for doomed in rename_for_deletion([directory]):
        remove_renamed(doomed)


class LogDeleter:
    """Removes renamed directories on one thread of its own, one directory per task, so that `close`
    waits for one removal at most; those it never reached are removed at the next start."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="log-deleter")

    def remove(self, doomed: Iterable[Path]) -> None:
        for directory in doomed:
            self._executor.submit(remove_renamed, directory)

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
