"""The S3 servers (real HTTP endpoints on 127.0.0.1) for the tiered storage tests.

`s3_server` is moto's. A module whose tests must hold on any S3 (upload, read, retention,
deletion, the follower bootstrap's reads) asks for `each_s3` instead, through
`s3_server = each_s3_server` (see `test_s3_storage.py`): its tests then run once against moto and
once against s3rver, a second, independent implementation (`tests.support.s3rver_server`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from tests.support.s3rver_server import start_s3rver
from tiered_follower.embedded_s3 import EmbeddedS3, start_embedded_s3

_buckets = itertools.count()


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[EmbeddedS3]:
    server = start_embedded_s3()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3rver_s3() -> Iterator[EmbeddedS3]:
    server = start_s3rver()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3_server(moto_s3: EmbeddedS3) -> EmbeddedS3:
    return moto_s3


@pytest.fixture(scope="session", params=["moto_s3", "s3rver_s3"], ids=["moto", "s3rver"])
def each_s3(request: pytest.FixtureRequest) -> EmbeddedS3:
    return request.getfixturevalue(request.param)


@pytest.fixture
def bucket(s3_server: EmbeddedS3) -> str:
    """A fresh bucket on the module's server."""
    name = f"tiered-test-{next(_buckets)}"
    s3_server.create_bucket(name)
    return name
