"""The image as a client on one listener sees it: brokers listed with that listener's endpoints.

Kafka answers Metadata (and FindCoordinator, and KIP-951's leader endpoints) with each broker's
endpoint of the listener the request came on, so a client that bootstrapped over SSL is sent to SSL
ports. The node's image lists the inter-broker listener's endpoints (what replica fetchers use);
a request on another listener (`quorum.security.principal.request_context().listener_name`) gets a
view of the same image with that listener's brokers, made once per image and listener.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from quorum.image.delta import listed_brokers
from quorum.image.image import BrokerInfo, MetadataImage
from quorum.security.principal import request_context


class ListenerViews:
    """Views of the latest image per listener name (older images' views are dropped)."""

    def __init__(self) -> None:
        self._image: MetadataImage | None = None
        self._views: dict[str, MetadataImage] = {}

    def of(self, image: MetadataImage, listener: str | None = None) -> MetadataImage:
        """`image` as listener `listener` (the current request's when None) sees it."""
        name = request_context().listener_name if listener is None else listener
        if not name or name == image.listener or image.listener is None:
            return image
        if image is not self._image:
            self._image, self._views = image, {}
        view = self._views.get(name)
        if view is None:
            view = self._views[name] = dataclasses.replace(
                image, brokers=listed_brokers(image.registrations, name), listener=name, encoded={})
        return view


_VIEWS = ListenerViews()


def listener_brokers(image: MetadataImage) -> Mapping[int, BrokerInfo]:
    """The brokers of `image` as the current request's listener lists them (KIP-951's leader endpoints
    in Produce and Fetch answers)."""
    return _VIEWS.of(image).brokers
