"""Route decoded requests to the handlers a node's roles register, and answer ApiVersions.

What a node advertises in ApiVersions is exactly what it has handlers for, as in Kafka, where
each listener advertises the APIs its role serves; the codec table knows many more.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from quorum.wire.api_versions import api_versions_response
from quorum.wire.protocol import API_VERSIONS_KEY, APIS, Api, Request


@dataclass(frozen=True, slots=True)
class Reply:
    """A response body and the version to encode it at (usually the request's)."""

    body: Any
    version: int


Handler = Callable[[Request], Awaitable[Reply | None]]
"""A handler answers a request, or returns None when the protocol sends no reply (acks=0 Produce)."""

Guard = Callable[[Request, Handler], Awaitable[Reply | None]]
"""Runs in place of every handler, given the handler: authorization (`quorum.security.authorization`)."""


class Dispatcher:
    def __init__(self) -> None:
        self._handlers: dict[int, Handler] = {API_VERSIONS_KEY: self._api_versions}
        self._served: dict[int, Api] = {API_VERSIONS_KEY: APIS[API_VERSIONS_KEY]}
        self._pipelined: dict[int, int | None] = {}  # api key -> its pipeline depth (None: the listener's bound)
        self.guard: Guard | None = None
        """Set by a node with an authorizer: decides before (and around) each handler."""

    def register(self, api_key: int, handler: Handler, max_version: int | None = None,
                 pipelined: bool = False, depth: int | None = None) -> None:
        """Serve `api_key` with `handler`, optionally capping the advertised version.

        `pipelined`: the listener may read and start a connection's next requests while this
        handler waits (answers still leave in request order). For handlers that only queue work
        elsewhere in arrival order, such as the controller's and the broker's forwarding, so that
        requests sent together can be decided together (issue 17), and for Produce, whose
        acks=all wait must not hold back the appends behind it (issue 37); every other API keeps
        Kafka's one request at a time per connection. `depth` bounds how many of this API's
        requests a connection has started and not yet answered (Produce: a megabyte each)."""
        if depth is not None and depth < 1:
            raise ValueError(f"pipeline depth {depth} of API {api_key}: at least 1")
        api = APIS[api_key]
        if max_version is not None and max_version < api.max_version:
            api = Api(api.key, api.name, api.request, api.response, api.min_version, max_version)
        self._handlers[api_key] = handler
        if pipelined:
            self._pipelined[api_key] = depth
        else:
            self._pipelined.pop(api_key, None)
        self._served = dict(sorted({**self._served, api_key: api}.items()))

    @property
    def served(self) -> dict[int, Api]:
        return self._served

    def pipelined(self, api_key: int) -> bool:
        """Whether `api_key`'s handler was registered `pipelined`."""
        return api_key in self._pipelined

    def pipeline_depth(self, api_key: int) -> int | None:
        """The `depth` a pipelined `api_key` was registered with; None: only the listener's own bound."""
        return self._pipelined.get(api_key)

    async def dispatch(self, request: Request) -> Reply | None:
        handler = self._handlers[request.api.key]
        if self.guard is None:
            return await handler(request)
        return await self.guard(request, handler)

    async def _api_versions(self, request: Request) -> Reply:
        body, version = api_versions_response(request, self._served)
        return Reply(body, version)
