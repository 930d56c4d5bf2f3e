import faulthandler
import os
import shutil
from collections.abc import Iterator

import pytest
from hypothesis import settings

from quorum.launcher import CLUSTERS, RunningNode, start_standalone

# Issue 21: every node a test starts checks, after each catch-up, that its image equals a replay of
# its snapshot plus log, and stops naming the first difference (quorum.image.verify).
os.environ.setdefault("QUORUM_TEST_VERIFY_IMAGE", "true")

# Hypothesis' 200 ms deadline per example measures the machine, not the code: with three workers and
# the process tests' clusters on two cores, a fast property test's example can wait its turn for
# longer (a split-ranges property failed that way, 3,000 examples pass without a deadline).
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

DEMO_TOPICS = ("orders:3", "payments:2", "audit:1")

if os.environ.get("QUORUM_TEST_CPU_REPORT"):  # where the suite's CPU goes, per test (tests/support/cpu_report.py)
    pytest_plugins = ["tests.support.cpu_report"]

LONGEST_MODULES_FIRST = (
    "tests/client_epochs/test_spark_processes.py",  # about 6 minutes at the suite's load (a Spark session, six streams)
    "tests/tiered/test_tiered_processes.py",  # about 3 minutes
    "tests/security/test_secured_cluster_processes.py",  # about 2.5 minutes, a local Spark session for two reads
    "tests/tiered/test_follower_bootstrap_processes.py",  # about 2 minutes
    "tests/test_demo.py",  # about 4.5 minutes at the suite's load (its part 7 starts Spark)
    "tests/test_bootstrap_chaos.py",
    "tests/client_epochs/test_mirror_flows_processes.py",  # about 1.5 minutes: three MM2-style runs
    "tests/client_epochs/test_spark_pipeline_processes.py",  # about 4 minutes (Spark standalone + Kafka)
    "tests/client_epochs/test_mirror_processes.py",
    "tests/test_soak_slice.py",  # about a minute, one process tree of 9 nodes and 5 clients
    "tests/broker/groups/consumer/test_kip848_processes.py",
    "tests/test_log_cleaner_processes.py",
    "tests/test_replication_chaos.py",
    "tests/image/test_image_histories.py",
    "tests/tiered/test_remote_storage_processes.py",
)
"""`./run test` hands modules to its workers in collection order (xdist's loadscope): the demo,
collected near the end, kept one worker busy alone for the suite's last two minutes. The longest
modules go first, the rest keep their order (longest-first scheduling). The three that start Spark
(the Spark modules and the demo) are spread out, not started together: a Spark query's driver-side
Python worker must connect back to the JVM within Spark's fixed 10 s, which three Spark starts at
once on two cores (load 15-20) sometimes missed ("Python worker failed to connect back")."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A test that fails while clusters of this worker run asks their nodes for their threads' stacks
    (into each node's log, kept with the test's temporary directory) and writes this process's own
    beside them (`test-process-stacks.txt` in each cluster's directory): the group rules module failed
    in fresh-clone runs with the test process's clients silent (members no longer heartbeating, the
    admin client timing out) while the brokers served."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed and report.when in ("setup", "call"):
        for cluster in list(CLUSTERS):
            cluster.dump_stacks()
            # and this test process's own threads (its clients: a group's members that stopped
            # heartbeating, an admin client that stopped answering), beside the nodes' logs
            with open(cluster.directory / "test-process-stacks.txt", "a") as out:
                out.write(f"--- {item.nodeid} ({report.when})\n")
                out.flush()
                faulthandler.dump_traceback(out, all_threads=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: place for place, path in enumerate(LONGEST_MODULES_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: modules stay whole


@pytest.fixture(scope="module")
def standalone_node() -> Iterator[RunningNode]:
    """A real `quorum standalone` process serving three topics."""
    node = start_standalone(*DEMO_TOPICS)
    try:
        yield node
    finally:
        assert node.stop() == 0, "".join(node.output)


@pytest.fixture(scope="session")
def kcat() -> str:
    path = shutil.which("kcat")
    if path is None:
        pytest.fail("kcat is not installed: `./run test` installs Debian's kcat package before the tests")
    return path
