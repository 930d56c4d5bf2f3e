"""The sans-IO KRaft controller (KIP-631): metadata requests and time in, metadata records and responses out.

`QuorumController` (controller.py) composes the pieces, each a module with one job:
`validation` (CreateTopics / DeleteTopics / CreatePartitions checks), `placement` (replica
placement), `heartbeats` (broker sessions and states), `election` (leader and ISR changes),
`configs` (topic and broker configs), `reassignment` and `reassignment_replicas` (KIP-455 partition
reassignment), `short_logs` (which replicas' local logs are short, from heartbeats), `records` (the
metadata records written) and `view` (what the controller reads of the metadata image).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"ControllerConfig": "controller", "QuorumController": "controller", "TickOutcome": "controller",
            "ApiError": "results", "ControllerResult": "results", "ControllerView": "view"}
"""The package's names, looked up in their modules on first use (PEP 562): a broker imports
`quorum.controller.validation` for topic-name checks, which must not load the whole controller."""

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'quorum.controller' has no attribute {name!r}")
    return getattr(importlib.import_module(f"quorum.controller.{module}"), name)
