"""Consumer groups and committed offsets: Kafka's classic group coordinator, sans-IO, plus its asyncio shell.

`GroupCoordinator` (coordinator.py) is the core; `GroupCoordinatorShell` (shell.py) drives it
over an `OffsetsLog` (offsets_log.py); `register_group_apis` (handlers.py) puts it on the wire.
"""
