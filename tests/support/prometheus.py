"""Reading a Prometheus endpoint the way the tests do: every sample by `name{labels}`."""

from __future__ import annotations

import urllib.request


def samples(url: str) -> dict[str, float]:
    """The samples the text exposition at `url` serves (labels as served: sorted by name)."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            found[name] = float(value)
    return found
