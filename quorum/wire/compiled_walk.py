"""Whether the leader's record walk runs compiled: `quorum.wire._walk`, built from `_walk.c` by the
project's install, or nothing, in which case `quorum.wire.records` walks records in Python alone.

The compiled walk is an accelerator, never a second authority: it answers only for bodies it is
sure the Python walk (`records._walk_records`, the reference) accepts, with the same summary, and
hands everything else back, so a checkout run without building it (PYTHONPATH at a source tree, a
machine without a compiler) behaves the same, only slower. That is why a missing extension is a
debug line, not a warning.

`QUORUM_PURE_PYTHON=1` in the environment forces the Python walk in every process that imports
records (a broker started with it included), to compare the two or to rule the C out; tests swap
`quorum.wire.records._compiled_walk` instead.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

__all__ = ["PURE_PYTHON_ENV", "CompiledWalk", "load_compiled_walk"]

log = logging.getLogger(__name__)

PURE_PYTHON_ENV = "QUORUM_PURE_PYTHON"

CompiledWalk = Callable[[bytes | bytearray | memoryview, int, int], "tuple[int, int, int, int, int] | None"]
"""`walk(body, origin, count)`: `_walk_records`'s summary as a tuple, or None for "ask Python"."""


def load_compiled_walk() -> CompiledWalk | None:
    """The compiled walk, or None when it is switched off or was not built."""
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        log.debug("%s is set: records are walked in Python", PURE_PYTHON_ENV)
        return None
    try:
        from quorum.wire import _walk
    except ImportError as exc:
        log.debug("quorum.wire._walk is not built (%s): records are walked in Python", exc)
        return None
    return _walk.walk
