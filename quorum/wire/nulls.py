"""Refuse a null where the schema says a field is not nullable, as Kafka's generated readers do.

kafka-python's schema engine reads a length of -1 as None for every string, bytes and array field,
nullable or not. Kafka's generated code throws "non-nullable field ... was serialized as null", so
the request fails to parse and the connection is closed; handlers here, written against the schema,
would otherwise meet a None where the schema promises a list or a string and fail with a TypeError
(the protocol fuzzer found ListOffsets, DescribeGroups, JoinGroup, DeleteRecords and Produce doing so),
or hang (DeleteTopics v0-v5 with a null among its topic names).

A checker is built once per struct and version: it looks only at the fields that can be null and
must not be, and walks into struct arrays only when their elements have such fields, so the common
hot requests (Fetch, Produce partitions) cost a few attribute reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kafka.protocol.schemas import StructField

Checker = Callable[[Any], "str | None"]
"""Returns the path of the first non-nullable field found null, or None."""

_CACHE: dict[tuple[int, int], Checker | None] = {}
_NULLABLE_TYPES = ("string", "bytes")


def null_field(struct: StructField, value: Any, version: int) -> str | None:
    """The dotted path of the first field of `value` that is null though `version` does not allow it."""
    checker = _checker(struct, version)
    return None if checker is None else checker(value)


def _checker(struct: StructField, version: int) -> Checker | None:
    key = (id(struct), version)
    if key not in _CACHE:
        _CACHE[key] = _build(struct, version)
    return _CACHE[key]


def _build(struct: StructField, version: int) -> Checker | None:
    plain: list[str] = []
    nested: list[tuple[str, Checker | None, bool, bool]] = []  # name, element checker, is array, nullable
    elements: list[str] = []  # arrays of strings or bytes
    for field in struct.fields.values():
        if not field.for_version_q(version) or field.tagged_field_q(version):
            continue  # an absent tagged field holds its default, whatever it is
        nullable = bool(field.nullable_for_version_q(version))
        if field.is_struct_array():
            nested.append((field.name, _checker(field.array_of, version), True, nullable))
        elif field.is_struct():
            nested.append((field.name, _checker(field, version), False, nullable))
        elif (field.is_array() or field.type_str in _NULLABLE_TYPES) and not nullable:
            plain.append(field.name)
        if field.is_array() and not field.is_struct_array() and field.array_of.type_str in _NULLABLE_TYPES:
            elements.append(field.name)  # an array's strings are never null, in any version
    nested = [entry for entry in nested if entry[1] is not None or not entry[3]]
    if not plain and not nested and not elements:
        return None

    def check(value: Any) -> str | None:
        for name in plain:
            if getattr(value, name) is None:
                return name
        for name in elements:
            items = getattr(value, name)
            if items is not None and None in items:
                return f"{name}[{items.index(None)}]"
        for name, element, is_array, nullable in nested:
            inner = getattr(value, name)
            if inner is None:
                if nullable:
                    continue
                return name
            if element is None:
                continue
            for item in inner if is_array else (inner,):
                path = element(item)
                if path is not None:
                    return f"{name}.{path}"
        return None

    return check
