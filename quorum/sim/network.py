"""The simulated network: per-message loss, delay, duplication (and so reordering), partitions.

Links are directed, so a partition can be symmetric (both directions cut) or asymmetric (A hears
B but B does not hear A, the case that makes leaders into zombies). A cut link is a black hole:
the sender learns nothing and relies on its timeouts, as with a silently dropped route. Every
random choice comes from the simulation's seeded generator.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(slots=True)
class LinkQuality:
    """What happens to a message on a working link."""

    loss: float = 0.0
    duplicate: float = 0.0
    min_delay_ms: int = 1
    max_delay_ms: int = 5


class Network:
    def __init__(self, rng: random.Random, quality: LinkQuality) -> None:
        self._rng = rng
        self.quality = quality
        self._cut: set[tuple[int, int]] = set()

    def delays(self, source: int, destination: int) -> list[int]:
        """Delivery delays of the copies of one message: none if lost or cut, two if duplicated.

        Independent delays per message are what reorder them.
        """
        if (source, destination) in self._cut:
            return []
        quality = self.quality
        rng = self._rng
        if quality.loss and rng.random() < quality.loss:
            return []
        copies = 2 if quality.duplicate and rng.random() < quality.duplicate else 1
        return [rng.randint(quality.min_delay_ms, quality.max_delay_ms) for _ in range(copies)]

    def cut(self, source: int, destination: int) -> None:
        self._cut.add((source, destination))

    def partition(self, side: Iterable[int], others: Iterable[int], symmetric: bool = True) -> None:
        """Cut `side` from `others` (both ways, or only the messages leaving `side`)."""
        others = list(others)
        for a in side:
            for b in others:
                if a != b:
                    self._cut.add((a, b))
                    if symmetric:
                        self._cut.add((b, a))

    def isolate(self, node: int, everyone: Iterable[int]) -> None:
        self.partition([node], everyone, symmetric=True)

    def heal(self) -> None:
        self._cut.clear()

    @property
    def cut_links(self) -> frozenset[tuple[int, int]]:
        return frozenset(self._cut)
