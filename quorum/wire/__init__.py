"""The one place where bytes on the wire or on disk are encoded and decoded."""
