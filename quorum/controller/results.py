"""What every controller operation returns, and the error it raises for a refused item.

A `ControllerResult` is the records to append (metadata record frames, in order, to be appended
as one batch so that they commit or are lost together) and the response to send once they are
committed. `ApiError` is an error code plus Kafka's message for it; the controller raises it
inside the validation of one topic, partition or resource and turns it into that item's error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from quorum.wire.errors import ErrorCode, error_name

OPERATION_NOT_ATTEMPTED = ErrorCode.OPERATION_NOT_ATTEMPTED
INVALID_UPDATE_VERSION = ErrorCode.INVALID_UPDATE_VERSION


@dataclass(frozen=True, slots=True)
class ControllerResult:
    """Records to append (metadata record frames) and the response to answer with once committed."""

    records: tuple[bytes, ...]
    response: Any


class ApiError(Exception):
    """A Kafka error code and message for one refused item (a topic, partition or resource)."""

    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(f"{error_name(code)}: {message}" if message else error_name(code))
        self.code = int(code)
        self.message = message

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ApiError) and (self.code, self.message) == (other.code, other.message)

    def __hash__(self) -> int:
        return hash((self.code, self.message))


NONE = ErrorCode.NONE

__all__ = ["INVALID_UPDATE_VERSION", "NONE", "OPERATION_NOT_ATTEMPTED", "ApiError", "ControllerResult"]
