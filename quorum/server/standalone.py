"""A single node that serves a fixed metadata image to real clients.

It exists so that the wire layer meets confluent-kafka, kafka-python and kcat from the start;
`quorum start` and `quorum local-cluster` supersede it as the quorum and brokers land.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Mapping

from quorum.broker.metadata import encoded_metadata_response
from quorum.image.image import MetadataImage, single_node_image
from quorum.net.dispatch import Dispatcher, Reply
from quorum.server.listener import KafkaListener
from quorum.wire.protocol import Request

METADATA_KEY = 3


def metadata_dispatcher(image_source: MetadataImage | None = None) -> tuple[Dispatcher, list[MetadataImage]]:
    """A dispatcher answering ApiVersions and Metadata from a swappable image holder."""
    holder: list[MetadataImage] = [image_source] if image_source is not None else []
    dispatcher = Dispatcher()

    async def handle_metadata(request: Request) -> Reply:
        return Reply(encoded_metadata_response(holder[0], request.body, request.version), request.version)

    dispatcher.register(METADATA_KEY, handle_metadata)
    return dispatcher, holder


async def serve_standalone(host: str, port: int, node_id: int, topics: Mapping[str, int],
                           cluster_id: str | None = None, ready: asyncio.Event | None = None) -> None:
    """Serve until SIGINT or SIGTERM; prints the bound address first so scripts can find it."""
    dispatcher, holder = metadata_dispatcher()
    listener = KafkaListener(dispatcher, host, port)
    await listener.start()
    holder.append(single_node_image(node_id, host, listener.port, topics, cluster_id))
    print(f"node {node_id} (standalone broker) listening on {host}:{listener.port}", flush=True)
    print(f"cluster id {holder[0].cluster_id}; topics: {', '.join(sorted(topics)) or '(none)'}", flush=True)
    print(f"bootstrap servers: {host}:{listener.port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready.set()
    await stop.wait()
    await listener.close()
    print(f"node {node_id} stopped", flush=True)
