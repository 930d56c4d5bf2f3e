"""A one-broker local cluster whose broker advertises a proxy (tests/support/proxy.py), so that
clients reach it, as their group coordinator too, only through that proxy."""

from __future__ import annotations

from quorum.launcher import LocalCluster, NodeSpec


class ProxiedCluster(LocalCluster):
    """Set `proxy_port` to the proxy's port before `format_storage`."""

    proxy_port = 0

    def properties(self, spec: NodeSpec) -> dict[str, str]:
        props = super().properties(spec)
        if spec.role == "broker":
            props["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{self.proxy_port}"
        return props
