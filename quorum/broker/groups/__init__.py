"""Consumer groups and committed offsets: Kafka's classic group coordinator and KIP-848's consumer
group protocol beside it (`consumer/`), sans-IO, plus their asyncio shell.

`GroupCoordinator` (coordinator.py) is the core, and holds KIP-848's groups too (`consumer.commands`);
`GroupCoordinatorShell` (shell.py) drives it over an `OffsetsLog` (offsets_log.py);
`register_group_apis` (handlers.py) puts both protocols on the wire.
"""
