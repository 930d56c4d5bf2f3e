"""A deterministic discrete-event simulator that drives the sans-IO Raft core (KIP-595's test plan).

`cluster.Simulation` runs voters and observers over a faulty `network.Network`, with crashes that
lose unflushed data (`memory_log.MemoryLog`), and checks `invariants.InvariantChecker` after
every event. `python -m quorum.sim` runs many seeds or replays one.
"""
