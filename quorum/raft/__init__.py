"""Sans-IO KRaft (KIP-595): a plain object that takes events and returns actions.

No sockets, clocks, threads or files: the asyncio node shell and the deterministic simulator
drive the same core. See `interface.py` for the contract between the core and whoever drives it.
"""
