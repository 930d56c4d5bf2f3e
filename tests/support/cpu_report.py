"""Where the suite's CPU goes, per test: the worker's own CPU (its threads: librdkafka clients,
in-process brokers, hypothesis) and its reaped children's (node processes, tools, Spark's JVM when
it exits), each measured around the test's setup, call and teardown.

Opt-in: `QUORUM_TEST_CPU_REPORT=<directory> ./run test` writes one JSON file per worker there
({test id: [own CPU-s, children CPU-s]}); a module-scoped cluster's nodes count where they are
reaped (the module's last test). The suite is CPU-bound on two cores, so this, not wall time,
says which tests to make cheaper.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPORT_DIRECTORY = os.environ.get("QUORUM_TEST_CPU_REPORT")
_spent: dict[str, list[float]] = {}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    own, children = time.process_time(), _children_cpu()
    try:
        return (yield)
    finally:
        _spent[item.nodeid] = [round(time.process_time() - own, 3), round(_children_cpu() - children, 3)]


def pytest_sessionfinish(session: pytest.Session) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    Path(REPORT_DIRECTORY or ".").mkdir(parents=True, exist_ok=True)
    (Path(REPORT_DIRECTORY or ".") / f"cpu-{worker}.json").write_text(json.dumps(_spent, indent=0))
