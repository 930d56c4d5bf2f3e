"""KIP-956's remote copy and fetch byte-rate quotas (Kafka's RLMQuotaManager), sans-IO.

Kafka measures the rate with a `SimpleRate` over a `WindowedSum`: `samples` windows of
`window_ms` each (`remote.log.manager.{copy,fetch}.quota.window.num`, default 11, and
`...quota.window.size.seconds`, default 1), a window closed when its time is up, a window with no
event for `samples * window_ms` forgotten. The rate is the sum of the live windows over the time
since the oldest one started, but never over less than one window (SimpleRate), so a first burst
is not read as an infinite rate. When the rate is above the quota, the throttle time is how long
to wait, recording nothing, to bring it back to the quota: `(rate - quota) / quota * window`
(QuotaUtils.throttleTime). The copier waits while it is positive, then records the segment's
bytes and copies; a consumer's Fetch of remote data is answered empty while it is positive, and
records the bytes it read after the read.

No clock, no thread here: the caller passes `now_ms` (and keeps its own lock).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tiered_follower.int_settings import int_setting

UNLIMITED = 2**63 - 1
"""Kafka's default quota (Long.MAX_VALUE): no limit."""
DEFAULT_WINDOW_NUM = 11
DEFAULT_WINDOW_SIZE_SECONDS = 1


class QuotaConfigError(ValueError):
    """A malformed `remote.log.manager.*.quota.*` / `*.max.bytes.per.second` setting; names the key."""


@dataclass(frozen=True, slots=True)
class QuotaConfig:
    """Kafka's RLMQuotaManagerConfig."""

    bytes_per_second: int = UNLIMITED
    samples: int = DEFAULT_WINDOW_NUM
    window_ms: int = DEFAULT_WINDOW_SIZE_SECONDS * 1000

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], kind: str) -> QuotaConfig:
        """`kind` is "copy" or "fetch": `remote.log.manager.{kind}.max.bytes.per.second`,
        `.{kind}.quota.window.num` and `.{kind}.quota.window.size.seconds`, Kafka's names and defaults."""
        base = f"remote.log.manager.{kind}"
        return cls(
            int_setting(properties, f"{base}.max.bytes.per.second", UNLIMITED, 1, QuotaConfigError),
            int_setting(properties, f"{base}.quota.window.num", DEFAULT_WINDOW_NUM, 1, QuotaConfigError),
            1000
            * int_setting(
                properties, f"{base}.quota.window.size.seconds", DEFAULT_WINDOW_SIZE_SECONDS, 1, QuotaConfigError
            ),
        )

    @property
    def limited(self) -> bool:
        return self.bytes_per_second < UNLIMITED


@dataclass(slots=True)
class _Sample:
    start_ms: int
    last_event_ms: int
    value: float = 0.0


class ByteRateQuota:
    """One quota: `record(bytes, now_ms)`, `throttle_ms(now_ms)`, `rate(now_ms)` (see the module docstring)."""

    def __init__(self, config: QuotaConfig) -> None:
        self.config = config
        self._samples: list[_Sample] = []
        self._current = 0

    def update(self, config: QuotaConfig) -> None:
        """A new quota (Kafka's updateQuota, a dynamic config change); the measured rate is kept."""
        self.config = config

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.config.window_ms:
            sample = self._advance(now_ms)
        sample.value += value
        sample.last_event_ms = now_ms

    def rate(self, now_ms: int) -> float:
        """Bytes per second now, as Kafka's SimpleRate measures it."""
        self._purge(now_ms)
        total = sum(sample.value for sample in self._samples)
        oldest = min((sample.start_ms for sample in self._samples), default=now_ms)
        elapsed_ms = max(now_ms - oldest, self.config.window_ms)
        return total * 1000 / elapsed_ms

    def throttle_ms(self, now_ms: int) -> int:
        """How long to wait, recording nothing, for the rate to come back to the quota; 0 when within it."""
        if not self.config.limited:
            return 0
        rate = self.rate(now_ms)
        bound = self.config.bytes_per_second
        if rate <= bound:
            return 0
        oldest = min(sample.start_ms for sample in self._samples)
        window_ms = max(now_ms - oldest, self.config.window_ms)
        return max(1, round((rate - bound) / bound * window_ms))

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms, now_ms))
        return self._samples[self._current]

    def _advance(self, now_ms: int) -> _Sample:
        # one more than `samples`: the window that overlaps the start of the measured span (SampledStat)
        self._current = (self._current + 1) % (self.config.samples + 1)
        if self._current >= len(self._samples):
            self._samples.append(_Sample(now_ms, now_ms))
        else:
            self._samples[self._current] = _Sample(now_ms, now_ms)
        return self._samples[self._current]

    def _purge(self, now_ms: int) -> None:
        expire_ms = self.config.samples * self.config.window_ms
        for number, sample in enumerate(self._samples):
            if now_ms - sample.last_event_ms >= expire_ms:
                self._samples[number] = _Sample(now_ms, now_ms)
