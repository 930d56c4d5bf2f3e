"""`kafka_epochs`, the PySpark Data Source: `planning` decides (sans-IO), `read` reads a planned range on
an executor, `source` is what Spark instantiates.

`from client_epochs.spark import KafkaEpochsSource, local_session` keeps working; the names are looked
up in `source` on first use so that importing the sans-IO planning rules does not start pyspark's import.
"""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    source = importlib.import_module("client_epochs.spark.source")
    try:
        return getattr(source, name)
    except AttributeError:
        raise AttributeError(f"module 'client_epochs.spark' has no attribute {name!r}") from None
