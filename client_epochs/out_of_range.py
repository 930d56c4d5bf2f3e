"""What a consumer does with OFFSET_OUT_OF_RANGE: reset only when the data is really gone (sans-IO).

A raw client resets by `auto.offset.reset` on every OFFSET_OUT_OF_RANGE answer. But the answer may
come from a broker that should not have been asked: one named leader by stale metadata, or a
lagging replica (KAFKA-6262). A MirrorMaker with `earliest` then rewinds to the start of the log
and copies it all again. So the wrappers first ask the partition's *current* leader for its log
bounds (`client_epochs.log_bounds`) and only then decide, here, by where the position lies:

- inside [log_start, log_end]: the data is there; the answer was stale. Resume at the position,
  and it is not a reset.
- below log_start: the records were deleted (retention, DeleteRecords). Reset by the policy:
  earliest to log_start, latest to log_end.
- above log_end: the log is shorter than what was already read (an unclean leader election
  truncated it). Reset to log_end, whatever the policy: `earliest` would deliver again every
  record already consumed, and the records past the end are gone, not skipped. Records appended
  after the truncation below the old position are not told apart here (that takes the leader
  epoch of the position and OffsetForLeaderEpoch, KIP-320, which librdkafka does itself).
- no known position (nothing committed, or a negative librdkafka logical offset): the policy as
  Kafka applies it, start or end of the log; Kafka does not call that a reset and neither do we.

With policy `error` (librdkafka) or `none` (Java, kafka-python) every case that would reset, and
a missing position, raises instead, naming the partition, the position and the bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from client_epochs.errors import NoOffsetForPartitionError, OffsetOutOfRangeError
from client_epochs.model import TopicPartition

Policy = Literal["earliest", "latest", "error"]

_POLICIES: dict[str, Policy] = {
    "earliest": "earliest", "smallest": "earliest", "beginning": "earliest",
    "latest": "latest", "largest": "latest", "end": "latest",
    "error": "error", "none": "error",
}
"""Every spelling of auto.offset.reset that librdkafka, the Java client or kafka-python accepts."""


def normalize_policy(policy: str) -> Policy:
    """"earliest", "latest" or "error" for any client's spelling; ValueError names anything else."""
    found = _POLICIES.get(str(policy).strip().lower())
    if found is None:
        raise ValueError(f"auto.offset.reset must be one of {', '.join(_POLICIES)}, not {policy!r}")
    return found


@dataclass(frozen=True, slots=True)
class Resolution:
    """Where to go on after OFFSET_OUT_OF_RANGE: `offset` to seek to, whether that counts as a
    `reset` (only when records were deleted or the log was truncated), and why, for the log."""

    offset: int
    reset: bool
    reason: str


def resolve(tp: TopicPartition, position: int | None, log_start: int, log_end: int, policy: str,
            *, leader: str = "the current leader") -> Resolution:
    """The decision of the module docstring for `position` against the current leader's log
    [log_start, log_end]; `leader` names who gave the bounds, for the reason and the errors.

    OffsetOutOfRangeError (policy error/none, records deleted or truncated) and
    NoOffsetForPartitionError (policy error/none, no position) name the partition and the bounds.
    """
    rule = normalize_policy(policy)
    if not 0 <= log_start <= log_end:
        raise ValueError(f"log bounds of {tp} from {leader} make no sense: [{log_start}, {log_end}]")
    bounds = f"{leader}'s log of {tp} is [{log_start}, {log_end}]"
    if position is None or position < 0:
        if rule == "error":
            raise NoOffsetForPartitionError(tp, log_start, log_end, f"{tp} has no committed or known position "
                                                                    f"and auto.offset.reset is {policy}; {bounds}")
        offset = log_start if rule == "earliest" else log_end
        return Resolution(offset, False, f"{tp} has no committed or known position: auto.offset.reset={policy} "
                                         f"starts at {offset}; {bounds}")
    if log_start <= position <= log_end:
        return Resolution(position, False, f"position {position} of {tp} is in range ({bounds}): the out-of-range "
                                           f"answer came from a broker with stale metadata or a lagging log")
    if position < log_start:
        why = f"records {position}..{log_start - 1} of {tp} were deleted (retention or DeleteRecords); {bounds}"
        if rule == "error":
            raise OffsetOutOfRangeError(tp, position, log_start, log_end, f"{why}; auto.offset.reset is {policy}")
        offset = log_start if rule == "earliest" else log_end
        return Resolution(offset, True, f"{why}: auto.offset.reset={policy} goes to {offset}")
    why = (f"{tp} was read up to {position} but its log now ends at {log_end} (truncated, e.g. by an unclean "
           f"leader election); {bounds}")
    if rule == "error":
        raise OffsetOutOfRangeError(tp, position, log_start, log_end, f"{why}; auto.offset.reset is {policy}")
    return Resolution(log_end, True, f"{why}: going on from its end, never its start, which would deliver "
                                     f"again records already consumed")
