"""Define message classes on kafka-python's JSON-schema engine without disturbing kafka-python.

kafka-python keeps one global table from API key to response class, which its own client uses
to decode what brokers send. A server-side class for the same key (for example MetadataResponse
with the KIP-232 topic_epoch tag) must not replace kafka-python's entry, or a kafka-python
client running in the same process would start decoding with the server's schema.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from kafka.protocol.api_data import ApiData
from kafka.protocol.api_header import ResponseClassRegistry
from kafka.protocol.api_message import ApiMessage

PROJECT_SCHEMAS = "quorum.wire.schemas"
KAFKA_PYTHON_SCHEMAS = "kafka.protocol.schemas.resources"

JsonPatch = Callable[[dict[str, Any]], dict[str, Any]]


@contextlib.contextmanager
def _registry_untouched() -> Iterator[None]:
    saved = dict(ResponseClassRegistry._response_class_registry)
    try:
        yield
    finally:
        registry = ResponseClassRegistry._response_class_registry
        registry.update(saved)


def define_message(name: str, package: str = PROJECT_SCHEMAS, patch: JsonPatch | None = None) -> type[ApiMessage]:
    """A request or response class built from the schema file `<name>.json` in `package`."""
    attrs: dict[str, Any] = {"__module__": __name__}
    if patch is not None:
        attrs["json_patch"] = classmethod(lambda cls, json: patch(json))
    with _registry_untouched():
        return type(name, (ApiMessage,), attrs, load_json=package)


def define_data(name: str, package: str = PROJECT_SCHEMAS, patch: JsonPatch | None = None) -> type[ApiData]:
    """A versioned data class (metadata record, control record) from the schema file `<name>.json`."""
    attrs: dict[str, Any] = {"__module__": __name__}
    if patch is not None:
        attrs["json_patch"] = classmethod(lambda cls, json: patch(json))
    return type(name, (ApiData,), attrs, load_json=package)
