"""Hypothesis strategies that build valid instances of any kafka-python schema class.

Works from the schema alone, so it serves kafka-python's own classes (`ApiMessage`), the
project's RPCs and its versioned data records (`ApiData`) alike: every field in the version,
with values in range for its type, nulls only where the version allows them, nested structs and
struct arrays built from the engine's own data classes, and tagged fields both absent (at their
default) and present.

Values are chosen so that a round trip is exact: a uuid is a random non-zero one or None
(kafka-python writes None as the zero uuid and reads the zero uuid back as None), floats are not
NaN, and a bitfield never is the set {31} (which the engine reads back as None).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from kafka.protocol.schemas import BaseField, StructField

MAX_ITEMS = 3
"""Longest array drawn: enough to show order and repetition, small enough to keep examples fast."""

INT_RANGES: dict[str, tuple[int, int]] = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}

_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
"""Strings that UTF-8 can encode (no lone surrogates)."""

_UUIDS = st.uuids().filter(lambda value: value.int != 0)


def simple_values(type_str: str) -> st.SearchStrategy[Any]:
    """Values of one simple (non-struct, non-array) schema type, never null."""
    if type_str in INT_RANGES:
        low, high = INT_RANGES[type_str]
        return st.integers(low, high)
    if type_str == "bool":
        return st.booleans()
    if type_str == "float64":
        return st.floats(allow_nan=False)
    if type_str == "string":
        return _TEXT
    if type_str in ("bytes", "records"):
        return st.binary(max_size=16)
    if type_str == "uuid":
        return st.none() | _UUIDS
    if type_str == "bitfield":
        return st.frozensets(st.integers(0, 30), max_size=4).map(set)
    raise ValueError(f"no strategy for schema type {type_str!r}")


def field_values(field: BaseField, version: int) -> st.SearchStrategy[Any]:
    """Values of one field at `version`: null included where the version allows it."""
    if field.is_struct_array():
        values: st.SearchStrategy[Any] = st.lists(struct_values(field.array_of, version), max_size=MAX_ITEMS)
    elif field.is_struct():
        values = struct_values(field, version)
    elif field.is_array():
        values = st.lists(_element_values(field.array_of), max_size=MAX_ITEMS)
    else:
        values = simple_values(field.type_str)
    if field.nullable_for_version_q(version) or (field.is_struct() and field.tagged_field_q(version)):
        # A tagged struct that is absent reads back as None, its default in kafka-python.
        values = st.none() | values
    return values


def _element_values(element: BaseField) -> st.SearchStrategy[Any]:
    # Array elements are never null in Kafka, except that a None uuid is the zero uuid.
    return simple_values(element.type_str)


def struct_values(struct_field: StructField, version: int) -> st.SearchStrategy[Any]:
    """An instance of a nested struct's data class with every field of `version` set."""
    return st.fixed_dictionaries(_field_strategies(struct_field, version)).map(
        lambda values: struct_field.data_class(**values))


def message_values(schema: type, version: int) -> st.SearchStrategy[Any]:
    """An instance of a top-level schema class (ApiMessage or ApiData) at `version`."""
    return st.fixed_dictionaries(_field_strategies(schema._struct, version)).map(
        lambda values: schema(version=version, **values))


def versioned_messages(schema: type) -> st.SearchStrategy[Any]:
    """An instance at any version from 0 to the schema's highest (kafka-python's range)."""
    return st.integers(0, schema.max_version).flatmap(lambda version: message_values(schema, version))


def _field_strategies(struct_field: StructField, version: int) -> dict[str, st.SearchStrategy[Any]]:
    return {field.name: field_values(field, version)
            for field in struct_field.fields.values() if field.for_version_q(version)}

