"""Where the fetch chunk cache keeps its chunks, within `fetch.chunk.cache.size` bytes, least
recently used evicted first: in memory (Aiven's MemoryChunkCache, the default) or in files on
local disk (Aiven's DiskChunkCache, `fetch.chunk.cache.path`), which holds far more than a
broker's heap should (a backfill of many partitions, reread by several consumers) and costs S3
nothing to read again.

A chunk file is a header (magic, the chunk's length, its CRC-32C) and the chunk. A file that is
short, longer than it says, or whose bytes do not match its CRC (a disk fault, a file cut by a
crash, another process writing there) is refused: deleted and reported missing, so the cache GETs
the chunk again; its bytes are never served. Files are written to a temporary name and renamed,
so a reader never meets one half written. The chunk files a previous run left in the directory
(their segments perhaps deleted since) are removed when the cache starts; nothing else there is
touched.

A disk store keeps the chunks read last in memory too (`front_chunks`): a sequential consumer
reads a chunk ~8 times, one Fetch at a time, and each would otherwise read and check the whole
file again.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Protocol

from crc32c import crc32c

logger = logging.getLogger(__name__)

ChunkKey = tuple[uuid.UUID, int]
"""A segment's id and the chunk's index in its `.log`."""

MAGIC = b"QCHK"
_HEADER = struct.Struct(">4sQI")  # magic, length, CRC-32C of the chunk
DEFAULT_FRONT_CHUNKS = 2


class ChunkStore(Protocol):
    """Chunks by key, within a byte bound; thread-safe."""

    stats: dict[str, int]

    @property
    def size(self) -> int:
        """Bytes of chunks held."""
        ...

    def __contains__(self, key: object) -> bool: ...

    def get(self, key: ChunkKey, memory_only: bool = False) -> bytes | None:
        """The chunk (and it becomes the most recently used), or None when it is not held, or
        when `memory_only` and reading it would read a file (on the event loop: read it on a thread)."""
        ...

    def put(self, key: ChunkKey, data: bytes) -> None:
        """Hold the chunk, evicting the least recently used ones beyond the bound."""
        ...


class MemoryChunkStore:
    """Chunks as bytes objects in memory."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._chunks: OrderedDict[ChunkKey, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.stats = {"evicted": 0}

    @property
    def size(self) -> int:
        with self._lock:
            return self._bytes

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._chunks

    def get(self, key: ChunkKey, memory_only: bool = False) -> bytes | None:
        with self._lock:
            found = self._chunks.get(key)
            if found is not None:
                self._chunks.move_to_end(key)
            return found

    def put(self, key: ChunkKey, data: bytes) -> None:
        with self._lock:
            if key in self._chunks:
                return
            self._chunks[key] = data
            self._bytes += len(data)
            while self._bytes > self._limit and self._chunks:
                _, evicted = self._chunks.popitem(last=False)
                self._bytes -= len(evicted)
                self.stats["evicted"] += 1


class DiskChunkStore:
    """Chunks in files under `directory`, `limit` bytes of chunks at most; see the module docstring."""

    def __init__(self, directory: str | Path, limit: int, front_chunks: int = DEFAULT_FRONT_CHUNKS) -> None:
        self.directory = Path(directory)
        self._limit = limit
        if self.directory.exists():
            if not self.directory.is_dir():
                raise NotADirectoryError(f"fetch.chunk.cache.path {self.directory} is not a directory")
            for entry in [*self.directory.glob("*.chunk"), *self.directory.glob("*.chunk.tmp-*")]:
                entry.unlink(missing_ok=True)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._files: OrderedDict[ChunkKey, int] = OrderedDict()  # key -> the chunk's length
        self._bytes = 0
        self._front_chunks = front_chunks
        self._recent: OrderedDict[ChunkKey, bytes] = OrderedDict()
        self._lock = threading.Lock()
        self.stats = {"evicted": 0, "refused": 0, "read": 0}
        """Files evicted by the bound, refused (short, long or damaged: deleted, GET again), read."""

    @property
    def size(self) -> int:
        with self._lock:
            return self._bytes

    def path(self, key: ChunkKey) -> Path:
        return self.directory / f"{key[0]}-{key[1]}.chunk"

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._files

    def get(self, key: ChunkKey, memory_only: bool = False) -> bytes | None:
        with self._lock:
            if key not in self._files:
                return None
            recent = self._recent.get(key)
            if recent is not None:
                self._files.move_to_end(key)
                self._recent.move_to_end(key)
                return recent
            if memory_only:
                return None
            self._files.move_to_end(key)
            length = self._files[key]
        data = self._read(key, length)  # outside the lock: reading 8 MiB takes a while
        with self._lock:
            if data is None:
                self._forget(key)
                return None
            self.stats["read"] += 1
            if self._front_chunks and key in self._files:
                self._recent[key] = data
                while len(self._recent) > self._front_chunks:
                    self._recent.popitem(last=False)
        return data

    def _read(self, key: ChunkKey, length: int) -> bytes | None:
        """The chunk file's bytes when whole and matching its header, else None (logged)."""
        path = self.path(key)
        try:
            with open(path, "rb") as file:  # the header, then the chunk: no copy of 8 MiB to drop it
                header, data, extra = file.read(_HEADER.size), file.read(length), file.read(1)
        except FileNotFoundError:
            problem = "is gone"
        else:
            problem = _problem(header, data, extra, length)
            if problem is None:
                return data
        logger.warning("chunk cache file %s %s: refused, the chunk is fetched again", path, problem)
        return None

    def _forget(self, key: ChunkKey) -> None:
        """Called with the lock held: a refused file leaves the cache and the disk."""
        length = self._files.pop(key, None)
        if length is not None:
            self._bytes -= length
            self.stats["refused"] += 1
        self._recent.pop(key, None)
        self.path(key).unlink(missing_ok=True)

    def put(self, key: ChunkKey, data: bytes) -> None:
        if len(data) > self._limit:
            return  # it would evict everything, itself included
        with self._lock:
            if key in self._files:
                return
        path = self.path(key)
        temporary = path.with_name(f"{path.name}.tmp-{threading.get_ident()}")
        with open(temporary, "wb") as out:
            out.write(_HEADER.pack(MAGIC, len(data), crc32c(data)))
            out.write(data)
        os.replace(temporary, path)  # a cache, not a log: no fsync; a file a crash cuts is refused on read
        with self._lock:
            if key in self._files:
                return
            self._files[key] = len(data)
            self._bytes += len(data)
            while self._bytes > self._limit and self._files:
                evicted, length = self._files.popitem(last=False)
                self._bytes -= length
                self._recent.pop(evicted, None)
                self.path(evicted).unlink(missing_ok=True)
                self.stats["evicted"] += 1


def _problem(header: bytes, data: bytes, extra: bytes, length: int) -> str | None:
    """What is wrong with a chunk file read as its `header`, the `length` bytes after it (`data`) and
    whatever follows them (`extra`, empty in a whole file), or None."""
    if len(header) < _HEADER.size:
        return f"holds {len(header)} bytes, less than its header"
    magic, said, crc = _HEADER.unpack(header)
    if magic != MAGIC:
        return f"starts with {magic!r}, not {MAGIC!r}"
    if said != length or len(data) != length or extra:
        held = f"{len(data)}{' and more' if extra else ''}"
        return f"holds {held} bytes of chunk (header: {said}), not the {length} stored"
    if crc32c(data) != crc:
        return "does not match its CRC-32C"
    return None
