"""A one-broker local cluster whose broker advertises a proxy (tests/support/proxy.py), so that
clients reach it, as their group coordinator too, only through that proxy."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from quorum.launcher import LocalCluster, NodeSpec
from tests.support.proxy import FrameProxy
from tests.test_broker_processes import BROKER, SETTINGS
from tests.test_controller_processes import metadata, wait_until

P = TypeVar("P", bound=FrameProxy)


class ProxiedCluster(LocalCluster):
    """Set `proxy_port` to the proxy's port before `format_storage`."""

    proxy_port = 0

    def properties(self, spec: NodeSpec) -> dict[str, str]:
        props = super().properties(spec)
        if spec.role == "broker":
            props["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{self.proxy_port}"
        return props


@contextmanager
def behind_proxy(directory: Path, make_proxy: Callable[[str, int], P]) -> Iterator[P]:
    """One controller and one broker (`BROKER`) reached through the proxy `make_proxy(host, port)`
    makes for the broker's listener; yields the proxy once the broker is unfenced, stops both after."""
    cluster = ProxiedCluster(directory, controllers=1, brokers=1, settings=SETTINGS)
    broker = cluster.specs[BROKER]
    with make_proxy("127.0.0.1", broker.port) as proxy:
        cluster.proxy_port = proxy.port
        cluster.format_storage()
        cluster.start()
        try:
            wait_until("the broker to be unfenced", lambda: metadata(broker.address)[0] == {BROKER})
            yield proxy
        finally:
            cluster.stop()
