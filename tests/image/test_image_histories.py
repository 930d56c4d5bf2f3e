"""250 random metadata histories: the incremental image equals a full replay after every step,
across snapshots too (issue 21; the machine is in `tests/image/histories.py`, the 10,000-history
run in `benchmarks/image_histories.py`)."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

from tests.image.histories import ImageHistories

TestImageHistories = ImageHistories.TestCase
TestImageHistories.settings = settings(
    max_examples=250, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
