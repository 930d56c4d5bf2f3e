"""A request's brokers are those of the listener it came on (issue 18): Metadata, FindCoordinator and
KIP-951's leader endpoints send an SSL client to SSL ports, a SASL_SSL client to SASL_SSL ports."""

from __future__ import annotations

import contextvars
import uuid

from quorum.broker.listener_view import ListenerViews, listener_brokers
from quorum.image.delta import listed_brokers
from quorum.image.image import BrokerRegistration, Endpoint, MetadataImage
from quorum.security.principal import RequestContext, set_request_context


def image() -> MetadataImage:
    registrations = {
        node: BrokerRegistration(node, uuid.uuid4(), 1, (Endpoint("SASL_SSL", "h", 9000 + node, 3),
                                                         Endpoint("SSL", "h", 8000 + node, 1)), fenced=False)
        for node in (1, 2)
    }
    registrations[3] = BrokerRegistration(3, uuid.uuid4(), 1, (Endpoint("SASL_SSL", "h", 9003, 3),), fenced=False)
    return MetadataImage(cluster_id="c", controller_id=1, brokers=listed_brokers(registrations, "SASL_SSL"),
                         registrations=registrations, listener="SASL_SSL")


def on(listener: str, call):
    def run():
        set_request_context(RequestContext(listener_name=listener))
        return call()

    return contextvars.copy_context().run(run)


def test_each_listener_sees_its_own_endpoints():
    base = image()
    views = ListenerViews()
    assert {n: b.port for n, b in on("SSL", lambda: views.of(base)).brokers.items()} == {1: 8001, 2: 8002}
    assert on("SASL_SSL", lambda: views.of(base)) is base
    assert views.of(base) is base  # outside a request (background work): the inter-broker listener's
    assert on("SSL", lambda: views.of(base)) is on("SSL", lambda: views.of(base))  # made once per image
    assert on("SSL", lambda: listener_brokers(base))[2].port == 8002
