"""Reading one integer setting of a node's properties, the error naming the key (one reader for
the remote tier's settings: `rlm_config`, `rlm_quota`, `chunk_cache`)."""

from __future__ import annotations

from collections.abc import Mapping


def int_setting(
    properties: Mapping[str, str], key: str, default: int, minimum: int, error: type[ValueError] = ValueError
) -> int:
    """`properties[key]` as an integer of at least `minimum`, `default` when unset or blank;
    raises `error` naming the key and the value otherwise."""
    text = properties.get(key)
    if text is None or not text.strip():
        return default
    try:
        value = int(text.strip())
    except ValueError:
        raise error(f"{key} must be an integer, got {text!r}") from None
    if value < minimum:
        raise error(f"{key} must be at least {minimum}, got {value}")
    return value
