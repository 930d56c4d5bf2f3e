"""One moto S3 server (a real HTTP endpoint on 127.0.0.1) for the tiered storage tests."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from tiered_follower.embedded_s3 import EmbeddedS3, start_embedded_s3

_buckets = itertools.count()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[EmbeddedS3]:
    server = start_embedded_s3()
    yield server
    server.stop()


@pytest.fixture
def bucket(s3_server: EmbeddedS3) -> str:
    """A fresh bucket on the shared server."""
    name = f"tiered-test-{next(_buckets)}"
    s3_server.create_bucket(name)
    return name
