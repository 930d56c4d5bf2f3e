"""Requests built from their schemas with every nullable field null, or every string empty (issue 21).

`request_body(api, version, mode)` walks the request schema at `version` and fills each field:

* ``"nulls"``: every field the schema marks nullable at that version is null; other strings are
  empty, numbers 0, arrays hold one element (so the nullable fields inside it are reached too);
* ``"empties"``: every string is empty, nullable or not, every bytes or records field empty;
* ``"null strings"``: every string is null even where the schema does not allow it, as the
  garbage frames of issue 21 had it (a Kafka broker refuses to parse those; a node must answer
  or close the connection cleanly, never fail in a handler).
"""

from __future__ import annotations

import uuid
from typing import Any

from quorum.wire.protocol import Api

MODES = ("nulls", "empties", "null strings")
_NUMBERS = frozenset({"int8", "int16", "int32", "int64", "uint16", "uint32", "float64"})
_ZERO_UUID = uuid.UUID(int=0)


def request_body(api: Api, version: int, mode: str) -> Any:
    """The request of `api` at `version`, filled as `mode` says (see the module docstring)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    return _struct(api.request._struct.fields, api.request, version, mode)


def nullable_paths(api: Api, version: int) -> list[str]:
    """The fields of the request that the schema lets be null at `version` (for messages)."""
    found: list[str] = []
    _walk_nullable(api.request._struct.fields, version, api.name, found)
    return found


def _walk_nullable(fields: dict[str, Any], version: int, path: str, found: list[str]) -> None:
    for name, field in fields.items():
        if not field.for_version_q(version):
            continue
        if field.nullable_for_version_q(version):
            found.append(f"{path}.{name}")
        if field.is_struct_array() or field.is_struct():
            _walk_nullable(field.fields, version, f"{path}.{name}", found)


def _struct(fields: dict[str, Any], cls: Any, version: int, mode: str) -> Any:
    values = {name: _value(field, version, mode) for name, field in fields.items() if field.for_version_q(version)}
    return cls(**values)


def _value(field: Any, version: int, mode: str) -> Any:
    if mode == "nulls" and field.nullable_for_version_q(version):
        return None
    if field.is_struct_array():
        return [_struct(field.fields, field.data_class, version, mode)]
    if field.is_array():
        return [_scalar(field.array_of.type_str, mode)]
    if field.is_struct():
        return _struct(field.fields, field.data_class, version, mode)
    return _scalar(field.type_str, mode)


def _scalar(type_name: str, mode: str) -> Any:
    if type_name == "string":
        return None if mode == "null strings" else ""
    if type_name in ("bytes", "records"):
        return b""
    if type_name == "uuid":
        return _ZERO_UUID
    if type_name == "bool":
        return False
    if type_name in _NUMBERS:
        return 0
    raise ValueError(f"no value for schema type {type_name!r}")
