"""The principal behind a request, as the listener learnt it, readable by any handler.

Kafka hands every handler a RequestContext (principal, listener, security protocol, client address).
Here the listener sets it once per connection in a context variable: the connection's task and every
task it starts (pipelined handlers, which `asyncio.ensure_future` starts with a copy of the context)
see it, so handlers ask `request_context()` instead of every Handler signature growing a parameter.
A connection that has not authenticated (PLAINTEXT, SSL without a client certificate) is
`User:ANONYMOUS`, as in Kafka.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """`User:alice`: Kafka's principal type and name (ACLs name principals this way)."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """`User:alice` -> KafkaPrincipal("User", "alice"); a text without a type is refused by name."""
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"a principal is TYPE:NAME (such as User:alice), not {text!r}")
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What the listener knows of the connection a request came on."""

    principal: KafkaPrincipal = ANONYMOUS
    listener_name: str = ""
    security_protocol: str = "PLAINTEXT"
    client_host: str = ""


_ANONYMOUS_CONTEXT = RequestContext()
_CURRENT: ContextVar[RequestContext | None] = ContextVar("quorum_request_context", default=None)


def request_context() -> RequestContext:
    """The context of the request being handled (the default, anonymous one outside a listener)."""
    return _CURRENT.get() or _ANONYMOUS_CONTEXT


def set_request_context(context: RequestContext) -> None:
    """Called by the listener in a connection's task once it knows who is on the other end (and again
    after SASL authentication or re-authentication)."""
    _CURRENT.set(context)
