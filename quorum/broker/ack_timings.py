"""Where an acks=all produce's wait for its followers goes: the leader's and the followers' share.

Kafka's `RemoteTimeMs` of a Produce (`quorum.server.request_metrics`) is the whole wait; issue 37
asks which part of it bounds replication. The leader times each wait that a follower's fetch
completes, in three consecutive parts, and each follower times its appends:

    quorum_replication_FollowerFetchWaitMs     the wait's start (the leader's append done) -> the
                                               leader reads the answer that carries the data to
                                               the follower whose acknowledgement completed the
                                               wait (at once for a parked fetch; else until that
                                               follower's next fetch comes)
    quorum_replication_FollowerRoundMs         that read -> the follower's next fetch arrives with
                                               its offset past the data: the answer's transfer,
                                               the follower's append, its next request
    quorum_replication_HighWatermarkAdvanceMs  that fetch's arrival -> the produce resumes: the
                                               fetch's handling, the high watermark's advance,
                                               the event loop's turn
    quorum_replication_FollowerAppendMs        (on a follower) one fetched answer's append
    quorum_replication_FollowerTurnaroundMs    (on a follower) a fetch's answer decoded -> the next
                                               fetch going out: the append, the rest of the
                                               answer's handling, the event loop's turn

A wait completed otherwise (its timeout, an ISR shrink, at once when the ISR is the leader
alone) is not split. The names are the project's, as Kafka has no such breakdown.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from quorum.net.latency import LatencyHistograms

PREFIX = "quorum_replication_"
PARTS = {
    "FollowerFetchWaitMs": "Milliseconds from an acks=all append to the leader's read of the answer carrying it to "
                           "the follower that completed the wait.",
    "FollowerRoundMs": "Milliseconds from that read to the follower's next fetch acknowledging the data.",
    "HighWatermarkAdvanceMs": "Milliseconds from that fetch's arrival to the acks=all produce resuming.",
    "FollowerAppendMs": "Milliseconds a follower took to append one fetched answer.",
    "FollowerTurnaroundMs": "Milliseconds from a fetch's answer decoded on a follower to its next fetch going out.",
}
_NO_LABELS: tuple[str, ...] = ()


class ReplicationTimings(Collector):
    """Fed by `Leadership` (waits, acknowledgements), the Fetch handler (answers read for followers)
    and the replica fetchers (appends); read by the metrics thread and by bench_replication."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.histograms = LatencyHistograms((), PARTS)
        self._clock = clock
        self._waits: dict[asyncio.Future[int], float] = {}
        self._answered: dict[tuple[Any, int], float] = {}  # (partition, follower) -> its last answer with data

    def follower_answered(self, partition: Any, replica_id: int) -> None:
        """The leader read records for `replica_id`'s fetch of `partition` (its answer goes out now)."""
        self._answered[(partition, replica_id)] = self._clock()

    def wait_started(self, future: asyncio.Future[int]) -> None:
        self._waits[future] = self._clock()

    def wait_ended(self, future: asyncio.Future[int], partition: Any, acknowledged: tuple[int, float] | None) -> None:
        """`future`'s wait is over; `acknowledged` is (follower, its fetch's arrival) when a follower's
        fetch completed it, which splits it into the three parts."""
        started = self._waits.pop(future, None)
        if started is None or acknowledged is None:
            return
        replica_id, arrived = acknowledged
        answered = self._answered.get((partition, replica_id))
        if answered is None or answered < started:
            return  # the data went out in an answer read before this wait began: no part to name
        self._observe("FollowerFetchWaitMs", answered - started)
        self._observe("FollowerRoundMs", arrived - answered)
        future.add_done_callback(lambda _: self._observe("HighWatermarkAdvanceMs", self._clock() - arrived))

    def forget(self, partition: Any) -> None:
        """`partition` is no longer led here."""
        for key in [key for key in self._answered if key[0] is partition]:
            del self._answered[key]

    def follower_appended(self, seconds: float) -> None:
        self._observe("FollowerAppendMs", seconds)

    def follower_turned_around(self, seconds: float) -> None:
        self._observe("FollowerTurnaroundMs", seconds)

    def _observe(self, name: str, seconds: float) -> None:
        self.histograms.observe(name, _NO_LABELS, max(seconds, 0.0) * 1000)

    def collect(self) -> Iterator[Metric]:
        yield from self.histograms.families(PREFIX)
