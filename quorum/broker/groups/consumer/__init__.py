"""KIP-848's consumer group protocol, sans-IO: ConsumerGroupHeartbeat's state machine beside the classic one.

`assignors` computes target assignments, `member` moves one member toward its target without ever
giving a partition two owners, `group` holds a group's epochs and owners, `rules` applies heartbeats
and expiries, and `commands` puts them into the classic `GroupCoordinator`, which owns the
partitions of `__consumer_offsets` both kinds of group live in.
"""
