"""Define message classes on kafka-python's JSON-schema engine without disturbing kafka-python.

kafka-python keeps one global table from API key to response class, which its own client uses
to decode what brokers send. A server-side class for the same key (for example MetadataResponse
with the KIP-232 topic_epoch tag) must not replace kafka-python's entry, or a kafka-python
client running in the same process would start decoding with the server's schema.

So the classes defined here never enter that table: kafka-python's registration is wrapped once
to skip a class this module is defining in the calling thread. (Registering and then putting the
old entry back left a moment in which a kafka-python client's thread could read the server's
class; the API table builds its classes on first use, while such clients may be running.)
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from kafka.protocol.api_data import ApiData
from kafka.protocol.api_header import ResponseClassRegistry
from kafka.protocol.api_message import ApiMessage

PROJECT_SCHEMAS = "quorum.wire.schemas"
KAFKA_PYTHON_SCHEMAS = "kafka.protocol.schemas.resources"

JsonPatch = Callable[[dict[str, Any]], dict[str, Any]]


_defining = threading.local()
"""`active` while this thread defines a class here: kafka-python's registration skips it."""
_kafka_python_register = ResponseClassRegistry.register_response_class


def _register_unless_defined_here(response_class: Any) -> None:
    if not getattr(_defining, "active", False):
        _kafka_python_register(response_class)


ResponseClassRegistry.register_response_class = staticmethod(_register_unless_defined_here)  # type: ignore[method-assign,assignment]


@contextlib.contextmanager
def _outside_kafka_pythons_registry() -> Iterator[None]:
    _defining.active = True
    try:
        yield
    finally:
        _defining.active = False


def define_message(name: str, package: str = PROJECT_SCHEMAS, patch: JsonPatch | None = None) -> type[ApiMessage]:
    """A request or response class built from the schema file `<name>.json` in `package`."""
    attrs: dict[str, Any] = {"__module__": __name__}
    if patch is not None:
        attrs["json_patch"] = classmethod(lambda cls, json: patch(json))
    with _outside_kafka_pythons_registry():
        return type(name, (ApiMessage,), attrs, load_json=package)


def define_data(name: str, package: str = PROJECT_SCHEMAS, patch: JsonPatch | None = None) -> type[ApiData]:
    """A versioned data class (metadata record, control record) from the schema file `<name>.json`."""
    attrs: dict[str, Any] = {"__module__": __name__}
    if patch is not None:
        attrs["json_patch"] = classmethod(lambda cls, json: patch(json))
    return type(name, (ApiData,), attrs, load_json=package)
