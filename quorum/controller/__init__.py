"""The sans-IO KRaft controller (KIP-631): metadata requests and time in, metadata records and responses out.

`QuorumController` (controller.py) composes the pieces, each a module with one job:
`validation` (CreateTopics / DeleteTopics / CreatePartitions checks), `placement` (replica
placement), `heartbeats` (broker sessions and states), `election` (leader and ISR changes),
`configs` (topic and broker configs), `reassignment` and `reassignment_replicas` (KIP-455 partition
reassignment), `short_logs` (which replicas' local logs are short, from heartbeats), `records` (the
metadata records written) and `view` (what the controller reads of the metadata image).
"""

from quorum.controller.controller import ControllerConfig, QuorumController, TickOutcome
from quorum.controller.results import ApiError, ControllerResult
from quorum.controller.view import ControllerView

__all__ = [
    "ApiError", "ControllerConfig", "ControllerResult", "ControllerView", "QuorumController", "TickOutcome",
]
