import os
import shutil
from collections.abc import Iterator

import pytest

from quorum.launcher import RunningNode, start_standalone

# Issue 21: every node a test starts checks, after each catch-up, that its image equals a replay of
# its snapshot plus log, and stops naming the first difference (quorum.image.verify).
os.environ.setdefault("QUORUM_TEST_VERIFY_IMAGE", "true")

DEMO_TOPICS = ("orders:3", "payments:2", "audit:1")


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
