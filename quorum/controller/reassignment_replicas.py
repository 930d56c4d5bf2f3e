"""The replica sets of a partition reassignment (KIP-455), as Kafka's PartitionReassignmentReplicas
and PartitionReassignmentRevert compute them: pure functions over broker id lists.

While a partition moves from its current replicas to a target, the image holds

* `replicas`: the target followed by the current replicas that are not in it (every broker that
  holds or will hold the partition, so that leader and followers count them all),
* `adding`: target replicas that are not current replicas (they start empty and catch up),
* `removing`: current replicas that are not in the target (they leave at completion).

Completion (Kafka's maybeCompleteReassignment) happens in the same change that brings the last
target replica into the ISR: replicas become the target, the ISR loses the removing replicas, and
adding and removing are cleared. It does not happen when it would leave the ISR empty, and it waits
for *every* target replica in the ISR (not only the adding ones), as Kafka's controller does.

Kafka computes a new reassignment against the partition's `replicas` even while one is in progress,
so a reassignment that replaces a pending one removes the brokers the earlier one was adding and
the new target does not name; these rules do the same. A broker the earlier one was adding that
the new target keeps stays an adding replica (it may not have caught up yet): Kafka keeps the old
AddingReplicas only when the new computation finds none, which for a target naming both a new
broker and one still being added would forget the latter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReassignmentReplicas:
    """The partition's replicas, adding and removing replicas while it moves to a target."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]

    @classmethod
    def of(cls, current: Sequence[int], target: Sequence[int], adding: Sequence[int] = ()) -> ReassignmentReplicas:
        """The move from `current` replicas (of which `adding` are still being added by a reassignment
        in progress) to `target`; adding and removing sorted, as Kafka's sets."""
        removing = tuple(sorted(set(current) - set(target)))
        still_adding = (set(target) - set(current)) | (set(adding) & set(target))
        return cls(tuple(target) + removing, tuple(sorted(still_adding)), removing)

    @property
    def in_progress(self) -> bool:
        return bool(self.adding or self.removing)


def complete(replicas: Sequence[int], isr: Sequence[int], adding: Sequence[int],
             removing: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(replicas, ISR) once the reassignment is done, when the ISR `isr` allows it; None when no
    reassignment is in progress, or it cannot complete yet (a target replica is not in the ISR, or
    the ISR would be left empty)."""
    if not adding and not removing:
        return None
    gone = set(removing)
    new_isr = tuple(broker for broker in isr if broker not in gone)
    new_replicas = tuple(broker for broker in replicas if broker not in gone)
    if not new_isr or not new_replicas or not set(new_replicas) <= set(new_isr):
        return None
    return new_replicas, new_isr


@dataclass(frozen=True, slots=True)
class Revert:
    """A cancelled reassignment (Kafka's PartitionReassignmentRevert): the replicas without the ones
    it was adding, the ISR without them too. `unclean` when only adding replicas were in the ISR:
    the ISR then becomes every kept replica, which may lose acknowledged records."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    unclean: bool

    @classmethod
    def of(cls, replicas: Sequence[int], isr: Sequence[int], adding: Sequence[int]) -> Revert:
        added = set(adding)
        kept = tuple(broker for broker in replicas if broker not in added)
        kept_isr = tuple(broker for broker in isr if broker not in added)
        return cls(kept, kept_isr or kept, not kept_isr)


__all__ = ["ReassignmentReplicas", "Revert", "complete"]
