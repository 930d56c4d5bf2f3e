"""Two metadata images compared field by field, naming the first difference (issue 21).

A node's image is built incrementally (`quorum.image.delta`, one delta per catch-up), and must
always equal the image a replay of its snapshot plus log gives: that is what a restart serves,
and what every other replica at the same offset serves. `image_difference` says where two
images part, as a path a reader can follow (``topics['orders'].partitions[2].isr``), so that a
divergence found by the `quorum.test.verify.image` check or by a property test names the field.

Mappings are compared in order too: images keep record-by-record replay order whatever the
batching (`quorum.image.delta`), and snapshots are written in that order, so replicas at the
same offset write identical snapshots only if the order matches. Fields declared with
``compare=False`` (memos, derived indexes) are left out, except `topics_by_id`, which Metadata
by topic id answers from and which must hold the same topics.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from quorum.image.image import MetadataImage

_CHECKED_DERIVED = frozenset({"topics_by_id"})
"""compare=False fields that are still served from and so are compared."""


def image_difference(left: MetadataImage, right: MetadataImage, *, ignore: frozenset[str] = frozenset()) -> str | None:
    """None when the images are equal; else the first difference, as ``path: left != right``.

    `ignore` names top-level fields left out: ``{"cluster_id", "controller_id"}`` to compare with
    an image replayed by a tool that does not know them, ``{"offset"}`` across snapshot cuts.
    """
    return _dataclass_difference("image", left, right, ignore)


def _difference(path: str, left: Any, right: Any) -> str | None:
    if left is right:
        return None
    if dataclasses.is_dataclass(left) and type(left) is type(right):
        return _dataclass_difference(path, left, right, frozenset())
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        return _mapping_difference(path, left, right)
    if _is_sequence(left) and _is_sequence(right):  # tuples, and a topic's undecoded PartitionRecords
        return _sequence_difference(path, left, right)
    if left != right or type(left) is not type(right):
        return f"{path}: {left!r} != {right!r}"
    return None


def _is_sequence(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def _dataclass_difference(path: str, left: Any, right: Any, skip: frozenset[str]) -> str | None:
    for spec in dataclasses.fields(left):
        name = spec.name
        if name in skip or (not spec.compare and name not in _CHECKED_DERIVED):
            continue
        found = _difference(f"{path}.{name}", getattr(left, name), getattr(right, name))
        if found is not None:
            return found
    return None


def _mapping_difference(path: str, left: Mapping[Any, Any], right: Mapping[Any, Any]) -> str | None:
    for key in left:
        if key not in right:
            return f"{path}[{key!r}]: present != absent"
    for key in right:
        if key not in left:
            return f"{path}[{key!r}]: absent != present"
    for key in left:
        found = _difference(f"{path}[{key!r}]", left[key], right[key])
        if found is not None:
            return found
    left_order, right_order = list(left), list(right)
    if left_order != right_order:
        index = next(i for i, (a, b) in enumerate(zip(left_order, right_order, strict=True)) if a != b)
        return f"{path} order at position {index}: {left_order[index]!r} != {right_order[index]!r}"
    return None


def _sequence_difference(path: str, left: Any, right: Any) -> str | None:
    if not any(dataclasses.is_dataclass(item) for item in (*left[:1], *right[:1])):  # replica ids, say: whole
        return None if tuple(left) == tuple(right) else f"{path}: {left!r} != {right!r}"
    for index, (a, b) in enumerate(zip(left, right, strict=False)):
        found = _difference(f"{path}[{index}]", a, b)
        if found is not None:
            return found
    if len(left) != len(right):
        return f"{path}: {len(left)} items != {len(right)} items"
    return None
