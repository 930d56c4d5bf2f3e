"""A stopping node ends its Raft requests before its metadata log closes, and none starts after:
each answered request drives the core, which asks for the next one, and that chain of `_send` tasks
outlived `RaftNode.run` in a CI run (a SIGTERMed broker drove its core after its log closed,
LogError, then went on fetching from its controller and never exited; quorum.server.node).

A controller and a broker (an observer, as in that run) run in this process. The broker's Fetch
answers are held at a gate from the moment it is told to stop, so a request is in flight when it
closes, whatever the timing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from quorum.launcher import LocalCluster
from quorum.raft import interface as raft
from quorum.server.config import node_config
from quorum.server.node import RaftNode
from tests.support.async_waits import DEADLINE_S, until


def test_a_broker_stopped_with_a_fetch_in_flight_leaves_no_request_running_and_its_core_is_not_driven_after(
        tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, controllers=1, brokers=1)
    cluster.format_storage()
    nodes = [RaftNode(node_config(cluster.properties(spec))) for spec in cluster.specs.values()]
    controller = next(n for n in nodes if n.config.is_controller)
    broker = next(n for n in nodes if not n.config.is_controller)
    assert broker.broker is not None
    peer = broker.peers[controller.config.node_id]
    real_request = peer.request
    gate = asyncio.Event()
    held: list[Any] = []  # the Fetches whose answer the gate holds

    async def held_after_stop(api: Any, version: int, body: Any, client_id: str | None = None) -> Any:
        answer = await real_request(api, version, body, client_id)
        if broker._stopped.is_set():
            held.append(body)
            await gate.wait()
        return answer

    peer.request = held_after_stop  # type: ignore[method-assign]
    run_returned = False
    driven_after_stop: list[str] = []
    for name in ("on_response", "on_send_failed", "tick"):
        real = getattr(broker.core, name)

        def recording(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> list[raft.Action]:
            if run_returned:
                driven_after_stop.append(_name)
            return _real(*args, **kwargs)

        setattr(broker.core, name, recording)
    errors: list[dict[str, Any]] = []

    async def test() -> None:
        nonlocal run_returned
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        controlling = asyncio.create_task(controller.run())
        try:
            serving = asyncio.create_task(broker.run())
            await asyncio.wait_for(broker.broker.lifecycle.ready.wait(), DEADLINE_S)
            broker._stopped.set()
            await until(lambda: bool(held), "a Fetch answered after the broker was told to stop is held")
            assert await asyncio.wait_for(serving, DEADLINE_S) == 0
            run_returned = True
            alive = [t for t in broker._sends if not t.done()]
            assert not alive, f"Raft requests still running after the node stopped: {alive}"
            gate.set()  # what the old code did with the held answer: drive the core on a closed log
            sends = [t for t in asyncio.all_tasks() if "RaftNode._send" in repr(t.get_coro())]
            if sends:
                await asyncio.wait(sends, timeout=DEADLINE_S)
            assert driven_after_stop == [], f"the stopped node's core was driven: {driven_after_stop}"
            failed = [t.exception() for t in sends if not t.cancelled() and t.exception() is not None]
            assert failed == [], f"a Raft request failed after the node stopped: {failed}"
        finally:
            gate.set()
            controller._stopped.set()
            assert await asyncio.wait_for(controlling, DEADLINE_S) == 0
        assert not [e for e in errors if "never retrieved" in e.get("message", "")], errors

    asyncio.run(test())
