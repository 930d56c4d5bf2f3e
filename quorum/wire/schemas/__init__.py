"""Message schemas the project writes itself, in the JSON layout kafka-python's engine reads.

Each file describes one message from the protocol facts in the specs (KIP-595, KIP-630,
KIP-631, KIP-232); kafka-python ships the client-facing ones, and these fill in the rest.
"""
