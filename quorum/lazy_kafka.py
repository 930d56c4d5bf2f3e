"""kafka-python's package without its clients until something asks for them.

The project reads Kafka's message schemas from kafka-python (`kafka.protocol.*`, `kafka.errors`,
`kafka.codec`), but importing any `kafka.*` module first runs `kafka/__init__.py`, which imports the
whole client (KafkaAdminClient, KafkaConsumer, KafkaProducer, their networking and ~120 more modules
with ~200 message classes built from JSON at import). Every node, tool and replicator process paid
that: a fifth of a broker's start-up CPU (0.82 s -> 0.60 s per process measured here), and the test
suite starts hundreds of them on two cores.

`defer_kafka_clients()` registers the `kafka` package with its path but without running its
`__init__`, so submodules import as usual; the first attribute asked of the package that is not a
submodule (`from kafka import KafkaConsumer`, `kafka.KafkaProducer`, `kafka.__version__`) runs the
real `__init__` in the same module object, once, and answers from it. A process that imported
`kafka` before `quorum` keeps the package as it is.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from types import ModuleType
from typing import Any

_PACKAGE = "kafka"


def defer_kafka_clients() -> None:
    """Register `kafka` without running its `__init__` (see the module docstring); idempotent."""
    if _PACKAGE in sys.modules:
        return
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return  # not installed as a package: importing it later fails where it is used, as before
    package = importlib.util.module_from_spec(spec)
    completion = _Completion(package)
    package.__getattr__ = completion.attribute  # type: ignore[attr-defined] # PEP 562
    sys.modules[_PACKAGE] = package


class _Completion:
    """Runs the package's real `__init__` on the first attribute that is neither set nor a submodule."""

    def __init__(self, package: ModuleType) -> None:
        self._package = package
        self._lock = threading.RLock()
        self._state = "deferred"  # -> "running" -> "done"

    def attribute(self, name: str) -> Any:
        namespace = self._package.__dict__
        if importlib.util.find_spec(f"{_PACKAGE}.{name}") is not None:
            return importlib.import_module(f"{_PACKAGE}.{name}")
        with self._lock:
            if self._state == "deferred":
                self._state = "running"
                try:
                    spec = self._package.__spec__
                    assert spec is not None and spec.loader is not None
                    spec.loader.exec_module(self._package)
                except BaseException:
                    self._state = "deferred"
                    raise
                self._state = "done"
        if name in namespace:
            return namespace[name]
        # while `__init__` runs (a submodule of it asking for a name not defined yet) or after it
        # ran, a missing name is missing, as on any module
        raise AttributeError(f"module {_PACKAGE!r} has no attribute {name!r}")
