"""Which member may do what in a classic group, and the error for one that may not: Kafka's checks,
kept apart from the state machine that applies them.

Every request a member sends after joining (SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, a
JoinGroup with its member id) is first checked against the group with Kafka's `validateMember`
(ClassicGroup.java; `validateCurrentMember` in the older GroupCoordinator.scala): a static
member's instance id must still be held by this member id (else FENCED_INSTANCE_ID: a newer
instance of it replaced this one), and the member id must be in the group (else
UNKNOWN_MEMBER_ID). A commit also has to come from the current generation, or be a "simple" commit
(generation -1, no member) to a group without members (`validateOffsetCommit`): a consumer whose
partitions were taken away learns that its commit did not count.
"""

from __future__ import annotations

from quorum.broker.groups.group import Group, GroupState
from quorum.wire.errors import ErrorCode

E = ErrorCode


def validate_member(group: Group, member_id: str, instance_id: str | None) -> int:
    """Kafka's validateMember: NONE, FENCED_INSTANCE_ID or UNKNOWN_MEMBER_ID."""
    if instance_id is not None:
        holder = group.current_member_for_instance(instance_id)
        if holder is None:
            return E.UNKNOWN_MEMBER_ID
        if holder != member_id:
            return E.FENCED_INSTANCE_ID
    return E.NONE if member_id in group.members else E.UNKNOWN_MEMBER_ID


def membership_error(group: Group | None, member_id: str, instance_id: str | None, generation: int) -> int:
    """SyncGroup's and Heartbeat's checks (validateSyncGroup / validateHeartbeat, before their
    protocol and state checks): the group must exist and be alive, the member be current, the
    generation be the group's."""
    if group is None:
        return E.UNKNOWN_MEMBER_ID
    if group.state is GroupState.DEAD:
        return E.COORDINATOR_NOT_AVAILABLE
    error = validate_member(group, member_id, instance_id)
    if error != E.NONE:
        return error
    return E.ILLEGAL_GENERATION if generation != group.generation else E.NONE


def validate_offset_commit(group: Group, generation: int, member_id: str, instance_id: str | None) -> int:
    """Kafka's ClassicGroup.validateOffsetCommit for a (non-transactional) OffsetCommit.

    In order: a dead group (unloaded) answers COORDINATOR_NOT_AVAILABLE; generation -1 to an Empty
    group is a simple commit, accepted whatever member id it names; a commit naming a generation,
    a member or an instance must come from a current member (validateMember) in the group's
    generation (ILLEGAL_GENERATION); one naming none of them is refused by a group with members
    (UNKNOWN_MEMBER_ID); and a current member committing while the group waits for its leader's
    assignment is told REBALANCE_IN_PROGRESS. A commit during PreparingRebalance from the current
    generation is accepted: the member still owns its partitions until it rejoins."""
    if group.state is GroupState.DEAD:
        return E.COORDINATOR_NOT_AVAILABLE
    if generation < 0 and group.state is GroupState.EMPTY:
        return E.NONE
    if generation >= 0 or member_id or instance_id is not None:
        error = validate_member(group, member_id, instance_id)
        if error != E.NONE:
            return error
        if generation != group.generation:
            return E.ILLEGAL_GENERATION
    elif group.state is not GroupState.EMPTY:
        return E.UNKNOWN_MEMBER_ID
    if group.state is GroupState.COMPLETING_REBALANCE:
        return E.REBALANCE_IN_PROGRESS
    return E.NONE
