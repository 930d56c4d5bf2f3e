"""Every `rsm.config.` setting the remote tier reads, and the refusal of every other one.

Kafka hands the whole `remote.log.storage.manager.impl.prefix` namespace (default `rsm.config.`)
to the remote storage plug-in. The names are those of Aiven's tiered-storage-for-apache-kafka.
Aiven's plug-in refuses what its ConfigDef does not know only for some keys; here every key under
the prefix is one this module knows, or the broker refuses to start naming it: an operator who
copies an Aiven config with `encryption.enabled=true` must not get plaintext segments because a
key was silently ignored (issue 36).

The S3 settings are `s3_client.S3Config`'s (listed in its docstring); beside them:

================================================= =================================================
`chunk.size`                                      bytes of `.log` per chunk: the unit of
                                                  compression and encryption when they are on, and
                                                  of the fetch cache's range GETs (default 8 MiB,
                                                  the multipart part size; `chunk_cache`)
`fetch.chunk.cache.class`                         memory or disk (`chunk_cache`, `chunk_store`)
`fetch.chunk.cache.path`                          a disk cache's directory
`fetch.chunk.cache.size`                          the fetch cache's bound (`chunk_cache`)
`fetch.chunk.cache.prefetch.max.size`             bytes fetched ahead of a read (`chunk_cache`)
`compression.enabled`                             zstd per chunk (default false)
`encryption.enabled`                              envelope encryption (default false): a data key
                                                  per segment, AES-256-GCM per chunk, the data key
                                                  wrapped with RSA-OAEP by the active key pair
`encryption.key.pair.id`                          the key pair that wraps new segments' data keys
`encryption.key.pairs`                            every key pair id (comma-separated): old ones
                                                  stay to read segments they wrapped
`encryption.key.pairs.<id>.public.key.file`       PEM files of each pair
`encryption.key.pairs.<id>.private.key.file`
`storage.backend.class`                           Aiven's S3 backend class name; no other backend
================================================= =================================================
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tiered_follower.chunk_cache import DEFAULT_CHUNK_SIZE
from tiered_follower.int_settings import int_setting
from tiered_follower.s3_client import DEFAULT_PREFIX, S3_KEYS, S3Config, S3ConfigError

MAX_CHUNK_SIZE = (1 << 30) - 1  # Aiven's bound
S3_BACKEND = "io.aiven.kafka.tieredstorage.storage.s3.S3Storage"
TRANSFORM_KEYS = frozenset(
    {
        "chunk.size",
        "compression.enabled",
        "encryption.enabled",
        "encryption.key.pair.id",
        "encryption.key.pairs",
        "fetch.chunk.cache.class",
        "fetch.chunk.cache.path",
        "fetch.chunk.cache.size",
        "fetch.chunk.cache.prefetch.max.size",
        "storage.backend.class",
    }
)
_KEY_FILE = re.compile(r"encryption\.key\.pairs\.([^.]+)\.(public|private)\.key\.file")


@dataclass(frozen=True, slots=True)
class KeyPair:
    """One configured RSA key pair, by its id (the id is what a segment's manifest names)."""

    id: str
    public_key: rsa.RSAPublicKey
    private_key: rsa.RSAPrivateKey


@dataclass(frozen=True, slots=True)
class TransformConfig:
    """How a segment's `.log` and indexes are transformed on their way to S3 (see `segment_transform`)."""

    chunk_size: int = DEFAULT_CHUNK_SIZE
    compression: bool = False
    active_key: KeyPair | None = None
    """The key pair wrapping new data keys; None: encryption is off."""
    key_pairs: Mapping[str, KeyPair] = field(default_factory=dict)
    """Every configured pair, to unwrap the data keys of segments written under older ones."""

    @property
    def transforms(self) -> bool:
        return self.compression or self.active_key is not None


@dataclass(frozen=True, slots=True)
class RsmConfig:
    s3: S3Config
    transform: TransformConfig

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> RsmConfig:
        """Both halves from a node's properties; S3ConfigError naming the first unknown or bad key."""
        prefix = properties.get("remote.log.storage.manager.impl.prefix", DEFAULT_PREFIX)
        if not prefix.strip():
            raise S3ConfigError(
                "remote.log.storage.manager.impl.prefix must not be empty (Kafka's default: rsm.config.)"
            )
        refuse_unknown(properties, prefix)
        return cls(S3Config.from_properties(properties), transform_config(properties, prefix))


def refuse_unknown(properties: Mapping[str, str], prefix: str) -> None:
    """S3ConfigError naming every `prefix` key this project does not implement."""
    unknown = sorted(key for key in properties if key.startswith(prefix)
                     and not _known(key[len(prefix):]))  # fmt: skip
    if unknown:
        raise S3ConfigError(
            f"{', '.join(unknown)}: not a setting this remote storage implements (the ones it "
            f"does are listed in tiered_follower/rsm_config.py); refusing to start rather than "
            f"ignore {'it' if len(unknown) == 1 else 'them'}"
        )


def _known(name: str) -> bool:
    return name in S3_KEYS or name in TRANSFORM_KEYS or _KEY_FILE.fullmatch(name) is not None


def _flag(properties: Mapping[str, str], key: str) -> bool:
    text = properties.get(key, "false").strip().lower()
    if text not in ("true", "false"):
        raise S3ConfigError(f"{key} must be true or false, got {properties[key]!r}")
    return text == "true"


def transform_config(properties: Mapping[str, str], prefix: str = DEFAULT_PREFIX) -> TransformConfig:
    backend = properties.get(prefix + "storage.backend.class", S3_BACKEND).strip()
    if backend != S3_BACKEND:
        raise S3ConfigError(f"{prefix}storage.backend.class={backend}: only S3 is implemented ({S3_BACKEND})")
    chunk_size = int_setting(properties, prefix + "chunk.size", DEFAULT_CHUNK_SIZE, 1, S3ConfigError)
    if chunk_size > MAX_CHUNK_SIZE:
        raise S3ConfigError(f"{prefix}chunk.size must be at most {MAX_CHUNK_SIZE}, got {chunk_size}")
    compression = _flag(properties, prefix + "compression.enabled")
    pairs = _key_pairs(properties, prefix)
    active: KeyPair | None = None
    if _flag(properties, prefix + "encryption.enabled"):
        active_id = properties.get(prefix + "encryption.key.pair.id", "").strip()
        if not active_id:
            raise S3ConfigError(f"{prefix}encryption.key.pair.id is required when {prefix}encryption.enabled is true")
        if active_id not in pairs:
            raise S3ConfigError(
                f"{prefix}encryption.key.pair.id={active_id} is not one of {prefix}"
                f"encryption.key.pairs ({', '.join(sorted(pairs)) or 'empty'})"
            )
        active = pairs[active_id]
    return TransformConfig(chunk_size, compression, active, pairs)


def _key_pairs(properties: Mapping[str, str], prefix: str) -> dict[str, KeyPair]:
    ids = [i.strip() for i in properties.get(prefix + "encryption.key.pairs", "").split(",") if i.strip()]
    for key in properties:
        found = _KEY_FILE.fullmatch(key[len(prefix) :]) if key.startswith(prefix) else None
        if found is not None and found.group(1) not in ids:
            raise S3ConfigError(f"{key}: key pair {found.group(1)!r} is not in {prefix}encryption.key.pairs")
    pairs: dict[str, KeyPair] = {}
    for pair_id in ids:
        public = _load(properties, f"{prefix}encryption.key.pairs.{pair_id}.public.key.file", private=False)
        private = _load(properties, f"{prefix}encryption.key.pairs.{pair_id}.private.key.file", private=True)
        if not isinstance(public, rsa.RSAPublicKey) or not isinstance(private, rsa.RSAPrivateKey):
            raise S3ConfigError(f"{prefix}encryption.key.pairs.{pair_id}: the key files must hold RSA keys")
        if public.public_numbers() != private.public_key().public_numbers():
            raise S3ConfigError(f"{prefix}encryption.key.pairs.{pair_id}: the public key is not the private key's")
        pairs[pair_id] = KeyPair(pair_id, public, private)
    return pairs


def _load(properties: Mapping[str, str], key: str, private: bool) -> object:
    path = properties.get(key, "").strip()
    if not path:
        raise S3ConfigError(f"{key} is required for a key pair listed in encryption.key.pairs")
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise S3ConfigError(f"{key}={path}: {exc.strerror or exc}") from None
    try:
        if private:
            return serialization.load_pem_private_key(data, password=None)
        return serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise S3ConfigError(f"{key}={path}: not a PEM {'private' if private else 'public'} key: {exc}") from None
