"""KIP-232 epoch-aware metadata caching and consumers that never rewind on stale metadata."""
