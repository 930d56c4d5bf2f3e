"""Compression and envelope encryption of a segment's objects, chunk by chunk (sans-IO).

Aiven's plug-in cuts a segment's `.log` into chunks of `chunk.size` bytes and transforms each on
its own, so a consumer's read at any offset needs only the chunks that hold it (one range GET over
their stored bytes), never the whole object. The same here:

* compression (`compression.enabled`): each chunk is a zstd frame (level 3);
* encryption (`encryption.enabled`), envelope semantics: every segment gets a fresh 256-bit data
  key and a random AAD; each chunk (after compression) is AES-256-GCM with a random 96-bit nonce,
  stored as `nonce || ciphertext || tag`, authenticated with the segment's AAD plus the chunk's
  place (`log:<n>` or `index:<kind>`), so a chunk moved to another place or segment fails its tag;
  the data key is stored only wrapped (RSA-OAEP, SHA-256) by the active key pair, whose id the
  manifest names. Rotating pairs: new segments take the new id; old ones are read while their
  pair stays listed in `encryption.key.pairs`.

Why client-side envelope encryption and not S3's SSE (`storage.s3.sse.*`): with SSE the bucket's
owner (and anyone with read access through S3's API) reads plaintext; the objects at rest are
encrypted only inside the provider. Here the broker alone holds the private key, so what any S3
client reads from the bucket is ciphertext (the tests grep the objects for the records' bytes),
on any S3 implementation, not only those that support SSE.

`ChunkIndex` maps a byte range of the original `.log` to the chunks holding it and their stored
byte span. Every failure is a `TransformError` naming what failed (the wrong key pair, a chunk
whose tag or size is wrong), never bytes that might be wrong.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import zstandard
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tiered_follower.rsm_config import KeyPair

NONCE_BYTES = 12
DATA_KEY_BYTES = 32
AAD_BYTES = 32
ZSTD_LEVEL = 3
_OAEP = padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA256()), algorithm=hashes.SHA256(), label=None)


class TransformError(Exception):
    """A stored chunk or data key that cannot be turned back into what was uploaded."""


class SegmentCipher:
    """One segment's data key and AAD (AES-256-GCM)."""

    def __init__(self, data_key: bytes, aad: bytes, key_pair_id: str) -> None:
        self._aead = AESGCM(data_key)
        self._data_key = data_key
        self.aad = aad
        self.key_pair_id = key_pair_id

    @classmethod
    def new(cls, key_pair: KeyPair) -> SegmentCipher:
        return cls(AESGCM.generate_key(bit_length=8 * DATA_KEY_BYTES), os.urandom(AAD_BYTES), key_pair.id)

    def manifest_entry(self, key_pair: KeyPair) -> dict[str, str]:
        """What the manifest keeps: the key pair's id, the data key wrapped by its public key, the AAD."""
        wrapped = key_pair.public_key.encrypt(self._data_key, _OAEP)
        return {
            "key_pair_id": key_pair.id,
            "data_key": base64.b64encode(wrapped).decode(),
            "aad": base64.b64encode(self.aad).decode(),
        }

    @classmethod
    def from_manifest(cls, entry: Mapping[str, Any], key_pairs: Mapping[str, KeyPair], where: str) -> SegmentCipher:
        """The data key unwrapped with the pair the manifest names; TransformError naming that
        pair when it is not configured or its private key is not the one that wrapped the key."""
        pair_id = str(entry.get("key_pair_id"))
        pair = key_pairs.get(pair_id)
        if pair is None:
            raise TransformError(
                f"{where} is encrypted with key pair {pair_id!r}, which is not in "
                f"encryption.key.pairs ({', '.join(sorted(key_pairs)) or 'none configured'})"
            )
        try:
            data_key = pair.private_key.decrypt(base64.b64decode(entry["data_key"]), _OAEP)
            aad = base64.b64decode(entry["aad"])
        except (ValueError, KeyError, TypeError) as exc:
            reason = str(exc) or type(exc).__name__
            raise TransformError(
                f"{where}: its data key does not unwrap with the private key of key pair "
                f"{pair_id!r} (not the key it was wrapped with?): {reason}"
            ) from None
        if len(data_key) != DATA_KEY_BYTES:
            raise TransformError(f"{where}: the data key unwrapped with key pair {pair_id!r} has {len(data_key)} bytes")
        return cls(data_key, aad, pair_id)

    def encrypt(self, data: bytes, place: str) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._aead.encrypt(nonce, data, self.aad + place.encode())

    def decrypt(self, data: bytes, place: str, where: str) -> bytes:
        if len(data) < NONCE_BYTES + 16:
            raise TransformError(f"{where}: {place} holds {len(data)} bytes, too few for AES-GCM")
        try:
            return self._aead.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], self.aad + place.encode())
        except InvalidTag:
            raise TransformError(
                f"{where}: {place} fails AES-GCM authentication (key pair "
                f"{self.key_pair_id!r}): damaged, or not this segment's"
            ) from None


@dataclass(frozen=True, slots=True)
class Transform:
    """What is done to each chunk: zstd first (ciphertext does not compress), then AES-GCM."""

    compression: bool
    cipher: SegmentCipher | None

    def forward(self, data: bytes, place: str) -> bytes:
        if self.compression:
            data = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(data)
        if self.cipher is not None:
            data = self.cipher.encrypt(data, place)
        return data

    def backward(self, data: bytes, place: str, size: int, where: str) -> bytes:
        """The original `size` bytes of `place`; TransformError if they do not come back whole."""
        if self.cipher is not None:
            data = self.cipher.decrypt(data, place, where)
        if self.compression:
            try:
                data = zstandard.ZstdDecompressor().decompress(data, max_output_size=size)
            except zstandard.ZstdError as exc:
                raise TransformError(f"{where}: {place} is not a zstd frame: {exc}") from None
        if len(data) != size:
            raise TransformError(f"{where}: {place} holds {len(data)} bytes once transformed back, not {size}")
        return data


def transform_chunks(chunks: Iterator[bytes], transform: Transform) -> Iterator[bytes]:
    """Each chunk of the `.log` transformed, in order (chunk n is place `log:n`)."""
    for number, chunk in enumerate(chunks):
        yield transform.forward(chunk, f"log:{number}")


@dataclass(frozen=True, slots=True)
class ChunkIndex:
    """Where each chunk of a transformed `.log` is in the stored object (Aiven's chunk index)."""

    original_size: int
    chunk_size: int
    stored_sizes: tuple[int, ...]

    def __post_init__(self) -> None:
        expected = -(-self.original_size // self.chunk_size) if self.original_size else 0
        if len(self.stored_sizes) != expected or any(size <= 0 for size in self.stored_sizes):
            raise TransformError(
                f"a chunk index of {len(self.stored_sizes)} chunks cannot describe "
                f"{self.original_size} bytes in chunks of {self.chunk_size}"
            )

    @property
    def stored_size(self) -> int:
        return sum(self.stored_sizes)

    def chunk_length(self, number: int) -> int:
        return min(self.chunk_size, self.original_size - number * self.chunk_size)

    def span(self, start: int, end: int) -> tuple[int, int, int, int]:
        """For original bytes [start, end) (0 <= start < end <= original_size): the first and last
        chunk holding them and the stored byte range [stored_start, stored_end) of those chunks."""
        first, last = start // self.chunk_size, (end - 1) // self.chunk_size
        offsets = self._offsets()
        return first, last, offsets[first], offsets[last + 1]

    def _offsets(self) -> list[int]:
        return [0, *accumulate(self.stored_sizes)]

    def split(self, first: int, last: int, stored: bytes) -> list[bytes]:
        """The stored bytes of chunks first..last (one range GET) cut into chunks."""
        offsets = self._offsets()
        base = offsets[first]
        return [stored[offsets[n] - base : offsets[n + 1] - base] for n in range(first, last + 1)]


def read_range(index: ChunkIndex, transform: Transform, start: int, end: int, stored: bytes, where: str) -> bytes:
    """Original bytes [start, end) from the stored bytes of the chunks `index.span` named."""
    first, last, _, _ = index.span(start, end)
    out = bytearray()
    for number, chunk in zip(range(first, last + 1), index.split(first, last, stored), strict=True):
        out += transform.backward(chunk, f"log:{number}", index.chunk_length(number), where)
    skip = start - first * index.chunk_size
    return bytes(out[skip : skip + end - start])


def stored_parts(parts: Sequence[tuple[str, bytes]], transform: Transform | None) -> list[tuple[str, bytes]]:
    """The `.indexes` parts as stored: each transformed whole (place `index:<kind>`), empty ones empty."""
    if transform is None:
        return list(parts)
    return [(kind, transform.forward(data, f"index:{kind}") if data else b"") for kind, data in parts]
