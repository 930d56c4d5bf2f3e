"""What a group's requests are answered in each state of its `__consumer_offsets` partition, as
Kafka's validateGroupStatus and CoordinatorRuntime answer them: named the leader by the broker's
metadata but not loaded yet (loading: COORDINATOR_LOAD_IN_PROGRESS, heartbeats answered blindly,
SyncGroup REBALANCE_IN_PROGRESS), loaded, not led (NOT_COORDINATOR) and unloaded."""

from __future__ import annotations

import asyncio

from quorum.broker.groups.config import GroupConfig
from quorum.broker.groups.coordinator import GroupCoordinator
from quorum.broker.groups.events import CommitEntry, Heartbeat, OffsetCommit, OffsetFetch
from quorum.broker.groups.offsets_log import InMemoryOffsetsLog
from quorum.broker.groups.shell import GroupCoordinatorShell
from quorum.wire.consumer_offsets import OffsetKey, OffsetValue, encode_record
from quorum.wire.errors import ErrorCode as E
from tests.broker.groups.harness import GROUP, Harness

CONFIG = GroupConfig(group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=3)


def fresh() -> tuple[Harness, int]:
    """A coordinator that leads nothing yet, and the partition of GROUP."""
    h = Harness(CONFIG)
    partition = h.core.partition_for(GROUP)
    for p in range(3):
        h.take(h.core.unload(p))
    return h, partition


def answers(h: Harness) -> dict[str, int]:
    commit = OffsetCommit(GROUP, (CommitEntry("t", 0, 5),))
    return {"join": h.answer(h.join()).error,
            "commit": h.answer(h.send("offset_commit", commit)).errors[0],
            "fetch": h.core.offset_fetch(OffsetFetch(GROUP)).error,
            "heartbeat": h.answer(h.send("heartbeat", Heartbeat(GROUP, 1, "m"))).error,
            "sync": h.answer(h.sync("m", 1)).error,
            "describe": h.core.describe_group(GROUP).error}


LOADING = {"join": E.COORDINATOR_LOAD_IN_PROGRESS, "commit": E.COORDINATOR_LOAD_IN_PROGRESS,
           "fetch": E.COORDINATOR_LOAD_IN_PROGRESS, "heartbeat": E.NONE, "sync": E.REBALANCE_IN_PROGRESS,
           "describe": E.COORDINATOR_LOAD_IN_PROGRESS}
NOT_LED = {"join": E.NOT_COORDINATOR, "commit": E.NOT_COORDINATOR, "fetch": E.NOT_COORDINATOR,
           "heartbeat": E.NOT_COORDINATOR, "sync": E.NOT_COORDINATOR, "describe": E.NOT_COORDINATOR}


def test_a_partition_the_metadata_names_this_broker_the_leader_of_is_loading_before_its_load_begins() -> None:
    h, partition = fresh()
    assert answers(h) == NOT_LED, "not named the leader: ask again who is"
    h.core.elected({partition})
    assert answers(h) == LOADING, "named the leader, logs not open yet: loading, retried by clients"
    assert h.core.list_groups().error == E.COORDINATOR_LOAD_IN_PROGRESS
    h.core.begin_loading(partition)
    assert answers(h) == LOADING
    h.core.finish_loading(partition, h.now)
    assert h.core.offset_fetch(OffsetFetch(GROUP)).error == E.NONE
    assert h.core.list_groups().error == E.NONE


def test_a_partition_led_elsewhere_or_being_unloaded_answers_not_coordinator() -> None:
    h, partition = fresh()
    h.core.elected({partition})
    h.core.begin_loading(partition)
    h.core.finish_loading(partition, h.now)
    h.core.elected(())  # the newest metadata names another leader; this broker has not applied it yet
    assert h.core.offset_fetch(OffsetFetch(GROUP)).error == E.NONE, "served until it resigns, as Kafka does"
    h.take(h.core.unload(partition))
    assert answers(h) == NOT_LED


def test_a_partition_that_failed_to_load_answers_not_coordinator() -> None:
    """A corrupt record stops the load and the shell unloads the partition: Kafka's coordinator
    answers NOT_COORDINATOR for a partition it failed to load, not loading for ever."""
    h, partition = fresh()
    h.core.elected({partition})
    h.core.begin_loading(partition)
    h.take(h.core.unload(partition))
    assert answers(h) == NOT_LED
    h.core.elected({partition})  # newer metadata names it the leader again: a new election
    assert answers(h) == LOADING


def test_a_load_superseded_by_a_resignation_and_a_new_election_does_not_finish_into_the_new_load() -> None:
    async def run() -> tuple[bool, bool, dict[int, bool]]:
        log = InMemoryOffsetsLog()
        log.partitions[0] = [encode_record(OffsetKey("g", "t", 0), OffsetValue(n, 0, "", 1_000)) for n in range(3000)]
        shell = GroupCoordinatorShell(GroupCoordinator(GroupConfig(offsets_topic_num_partitions=1)), log)
        first = asyncio.create_task(shell.become_leader(0))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        shell.resign(0)
        second = asyncio.create_task(shell.become_leader(0))
        results = await asyncio.gather(first, second)
        await shell.close()
        return results[0], results[1], shell.core.partitions

    first, second, partitions = asyncio.run(run())
    assert (first, second, partitions) == (False, True, {0: True})
