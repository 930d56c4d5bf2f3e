"""KIP-1023: bootstrap an empty follower from the last tiered offset of remote storage."""
