"""The asyncio plumbing every role shares: the request dispatcher and the client side of a peer
connection. It sits below both `quorum.server` (the node and its listener) and `quorum.broker`
(which answers through the dispatcher and calls the controller and the leaders through peer
clients), so that neither borrows from the other."""
