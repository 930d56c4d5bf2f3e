"""OffsetFetch answered UNSTABLE_OFFSET_COMMIT (a commit of the partition appended, not yet replicated)
is asked again, as Kafka's consumer does, instead of failing the caller (issue 19's soak: over half of
the samples of a group committing every second failed so)."""

from __future__ import annotations

import pytest

from client_epochs.model import TopicPartition
from client_epochs.offset_fetch import CommittedOffset, OffsetFetcher, OffsetFetchError
from quorum.wire.errors import ErrorCode


def test_an_unstable_offset_commit_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    fetcher = OffsetFetcher("127.0.0.1:1", retry_backoff_s=0.01)
    tries = []
    key = TopicPartition("soak", 0)

    def fetch_once(group, wanted, deadline):
        tries.append(group)
        if len(tries) < 3:
            raise OffsetFetchError("127.0.0.1:1", "OffsetFetch of soak-0", ErrorCode.UNSTABLE_OFFSET_COMMIT)
        return {key: CommittedOffset(42, 3, "")}

    monkeypatch.setattr(fetcher, "_fetch_once", fetch_once)
    assert fetcher.fetch("soak-group", [key], timeout=60)[key].offset == 42
    assert len(tries) == 3


def test_an_error_that_is_not_retriable_still_fails_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    fetcher = OffsetFetcher("127.0.0.1:1", retry_backoff_s=0.01)
    tries = []

    def fetch_once(group, wanted, deadline):
        tries.append(group)
        raise OffsetFetchError("127.0.0.1:1", "OffsetFetch", ErrorCode.GROUP_AUTHORIZATION_FAILED)

    monkeypatch.setattr(fetcher, "_fetch_once", fetch_once)
    with pytest.raises(OffsetFetchError, match="error code 30"):
        fetcher.fetch("soak-group", [TopicPartition("soak", 0)], timeout=60)
    assert len(tries) == 1


def test_which_failures_asking_again_may_cure() -> None:
    """The wrappers keep new partitions paused and ask again on these, and raise the others."""
    from client_epochs.connection import BrokerError
    from client_epochs.offset_fetch import is_retriable

    where = "127.0.0.1:1"
    for code in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                 ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
        assert is_retriable(OffsetFetchError(where, "FindCoordinator", code))
    assert is_retriable(BrokerError(where, "no answer before the deadline"))
    refused = OffsetFetchError(where, "OffsetFetch", ErrorCode.GROUP_AUTHORIZATION_FAILED)
    assert not is_retriable(refused) and "GROUP_AUTHORIZATION_FAILED (error code 30)" in str(refused)
