"""The remote log manager's own settings (Kafka's RemoteLogManagerConfig): pools, reads, quotas.

Kafka's names and defaults (4.x):

================================================== ======= ============================================
`remote.log.manager.thread.pool.size`              10      the follower pool: followers' metadata
                                                           reloads and the KIP-1023 bootstrap's reads
`remote.log.manager.copier.thread.pool.size`       -1      segment uploads; -1: thread.pool.size
`remote.log.manager.expiration.thread.pool.size`   -1      remote deletions; -1: thread.pool.size
`remote.log.reader.threads`                        10      consumers' reads of remote segments
`remote.log.reader.max.pending.tasks`              100     reads queued beyond the busy threads; a
                                                           read past that is answered empty at once
`remote.fetch.max.wait.ms`                         500     KIP-1018: how long a Fetch waits for its
                                                           remote read before answering without it
`remote.log.manager.copy.max.bytes.per.second`     no limit KIP-956, with `.copy.quota.window.num`
`remote.log.manager.fetch.max.bytes.per.second`    no limit and `.window.size.seconds` (rlm_quota)
`remote.log.manager.task.interval.ms`              30000   how often the task runs
`remote.log.metadata.custom.metadata.max.bytes`    128     KIP-917: a copy whose custom metadata is
                                                           larger is deleted and fails
================================================== ======= ============================================

Kafka's `remote.log.manager.thread.pool.size` is deprecated in 4.x and only the fallback of the
two others; here it also sizes the follower pool, as Kafka's followerThreadPool does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tiered_follower.int_settings import int_setting
from tiered_follower.rlm_quota import QuotaConfig, QuotaConfigError

DEFAULT_TASK_INTERVAL_MS = 30_000
DEFAULT_THREADS = 10
DEFAULT_READER_THREADS = 10
DEFAULT_READER_MAX_PENDING = 100
DEFAULT_REMOTE_FETCH_MAX_WAIT_MS = 500
DEFAULT_CUSTOM_METADATA_MAX_BYTES = 128


class RemoteLogManagerConfigError(QuotaConfigError):
    """A malformed `remote.log.*` / `remote.fetch.*` setting; names the key."""


def _int(properties: Mapping[str, str], key: str, default: int, minimum: int, allow_unset: bool = False) -> int:
    """`int_setting`; with `allow_unset` also -1 (Kafka's "the value of remote.log.manager.thread.pool.size")."""
    value = int_setting(properties, key, default, -1 if allow_unset else minimum, RemoteLogManagerConfigError)
    if allow_unset and value != -1 and value < minimum:
        raise RemoteLogManagerConfigError(
            f"{key} must be at least {minimum} (or -1: the value of remote.log.manager.thread.pool.size), got {value}"
        )
    return value


@dataclass(frozen=True, slots=True)
class RemoteLogManagerConfig:
    task_interval_ms: int = DEFAULT_TASK_INTERVAL_MS
    follower_threads: int = DEFAULT_THREADS
    copier_threads: int = DEFAULT_THREADS
    expiration_threads: int = DEFAULT_THREADS
    reader_threads: int = DEFAULT_READER_THREADS
    reader_max_pending: int = DEFAULT_READER_MAX_PENDING
    fetch_max_wait_ms: int = DEFAULT_REMOTE_FETCH_MAX_WAIT_MS
    copy_quota: QuotaConfig = QuotaConfig()
    fetch_quota: QuotaConfig = QuotaConfig()
    custom_metadata_max_bytes: int = DEFAULT_CUSTOM_METADATA_MAX_BYTES

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> RemoteLogManagerConfig:
        pool = _int(properties, "remote.log.manager.thread.pool.size", DEFAULT_THREADS, 1)
        copier = _int(properties, "remote.log.manager.copier.thread.pool.size", -1, 1, allow_unset=True)
        expiration = _int(properties, "remote.log.manager.expiration.thread.pool.size", -1, 1, allow_unset=True)
        return cls(
            task_interval_ms=_int(properties, "remote.log.manager.task.interval.ms", DEFAULT_TASK_INTERVAL_MS, 1),
            follower_threads=pool,
            copier_threads=pool if copier == -1 else copier,
            expiration_threads=pool if expiration == -1 else expiration,
            reader_threads=_int(properties, "remote.log.reader.threads", DEFAULT_READER_THREADS, 1),
            reader_max_pending=_int(properties, "remote.log.reader.max.pending.tasks", DEFAULT_READER_MAX_PENDING, 1),
            fetch_max_wait_ms=_int(properties, "remote.fetch.max.wait.ms", DEFAULT_REMOTE_FETCH_MAX_WAIT_MS, 1),
            copy_quota=QuotaConfig.from_properties(properties, "copy"),
            fetch_quota=QuotaConfig.from_properties(properties, "fetch"),
            custom_metadata_max_bytes=_int(properties, "remote.log.metadata.custom.metadata.max.bytes",
                                           DEFAULT_CUSTOM_METADATA_MAX_BYTES, 0),
        )
