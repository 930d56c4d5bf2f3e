"""boto3 against S3 with the retries tiered storage needs, and the `rsm.config.` settings.

Configuration follows Kafka's `remote.log.storage.manager.impl.prefix` (default `rsm.config.`)
and, under it, the names of Aiven's tiered-storage-for-apache-kafka S3 plug-in:

=========================================== ======================================================
`rsm.config.storage.s3.bucket.name`         the bucket (required)
`rsm.config.key.prefix`                     prepended to every object key (default "")
`rsm.config.storage.s3.region`              the region (default us-east-1)
`rsm.config.storage.s3.endpoint.url`        an S3-compatible endpoint (moto, MinIO); AWS's by default
`rsm.config.storage.aws.access.key.id`      credentials; boto3's default chain when unset
`rsm.config.storage.aws.secret.access.key`
`rsm.config.storage.s3.multipart.upload.part.size` part size of multipart uploads, also the size
                                            above which a `.log` goes up in parts (default 8 MiB,
                                            at least S3's 5 MiB)
`rsm.config.storage.s3.api.call.timeout.ms` socket timeout of one call (default 30000)
`rsm.config.storage.retries`                attempts per call before giving up (default 8)
`rsm.config.storage.s3.upload.concurrency`  parts of one multipart upload sent at a time (default 4)
`rsm.config.storage.s3.path.style.access.enabled` true: `endpoint/bucket/key`; false: virtual-hosted
                                            `bucket.endpoint/key`; unset: boto3 chooses (Aiven
                                            leaves it to the AWS SDK the same way)
`rsm.config.storage.s3.storage.class`       the storage class of every object written (default
                                            STANDARD; S3's names, checked at start)
=========================================== ======================================================

Any other key under the prefix is refused at start (`rsm_config`, with the chunking, compression
and encryption settings).

Every call goes through `S3Client.call`, which retries transient faults (HTTP 5xx, SlowDown and
the other throttling codes, connection resets and timeouts, bodies cut short) with exponential
backoff and full jitter, and turns a permanent one (no such bucket, access denied, ...) into a
`RemoteStorageError` naming the operation, bucket and key. botocore's own retries are off so
that the counts (`stats`) are the real ones. boto3 is blocking: callers run this on a thread pool.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import boto3
import botocore.config
import botocore.exceptions
import urllib3.exceptions

from quorum.broker.remote_tier import RemoteStorageError

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_PREFIX = "rsm.config."
MIN_PART_SIZE = 5 * 1024 * 1024
DEFAULT_PART_SIZE = 8 * 1024 * 1024
STORAGE_CLASSES = frozenset({"STANDARD", "REDUCED_REDUNDANCY", "STANDARD_IA", "ONEZONE_IA", "INTELLIGENT_TIERING",
                             "GLACIER", "DEEP_ARCHIVE", "OUTPOSTS", "GLACIER_IR", "SNOW", "EXPRESS_ONEZONE"})
"""S3's StorageClass values (the PutObject API's enum)."""
S3_KEYS = frozenset({"storage.s3.bucket.name", "key.prefix", "storage.s3.region", "storage.s3.endpoint.url",
                     "storage.aws.access.key.id", "storage.aws.secret.access.key",
                     "storage.s3.multipart.upload.part.size", "storage.s3.api.call.timeout.ms", "storage.retries",
                     "storage.s3.upload.concurrency", "storage.s3.path.style.access.enabled",
                     "storage.s3.storage.class"})
"""The `rsm.config.` keys `S3Config` reads (`rsm_config` refuses the ones nobody reads)."""
TRANSIENT_CODES = frozenset({
    "500", "502", "503", "504", "InternalError", "ServiceUnavailable", "SlowDown", "Throttling",
    "ThrottlingException", "RequestTimeout", "RequestTimeTooSkewed", "RequestLimitExceeded",
    "TooManyRequestsException", "BadDigest", "IncompleteBody",
})
TRANSIENT_EXCEPTIONS: tuple[type[BaseException], ...] = (
    botocore.exceptions.ConnectionError,  # EndpointConnectionError, ConnectionClosedError, ...
    botocore.exceptions.HTTPClientError,  # ReadTimeoutError, ProxyConnectionError, ...
    botocore.exceptions.ResponseStreamingError,
    botocore.exceptions.IncompleteReadError,
    urllib3.exceptions.ProtocolError,
    urllib3.exceptions.HTTPError,
    ConnectionError,
    TimeoutError,
)


class S3ConfigError(ValueError):
    """A missing or malformed `rsm.config.` setting; names the key."""


@dataclass(frozen=True, slots=True)
class S3Config:
    bucket: str
    key_prefix: str = ""
    region: str = "us-east-1"
    endpoint_url: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    part_size: int = DEFAULT_PART_SIZE
    call_timeout_ms: int = 30_000
    attempts: int = 8
    upload_concurrency: int = 4
    backoff_base_ms: int = 50
    backoff_max_ms: int = 5_000
    path_style: bool | None = None
    """`storage.s3.path.style.access.enabled`; None lets boto3 choose."""
    storage_class: str = "STANDARD"

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> S3Config:
        """From a node's properties, under `remote.log.storage.manager.impl.prefix`."""
        prefix = properties.get("remote.log.storage.manager.impl.prefix", DEFAULT_PREFIX)

        def get(name: str) -> str | None:
            value = properties.get(prefix + name)
            return value.strip() if value is not None and value.strip() else None

        def number(name: str, default: int, minimum: int) -> int:
            text = get(name)
            if text is None:
                return default
            try:
                value = int(text)
            except ValueError:
                raise S3ConfigError(f"{prefix}{name} must be an integer, got {text!r}") from None
            if value < minimum:
                raise S3ConfigError(f"{prefix}{name} must be at least {minimum}, got {value}")
            return value

        path_style = get("storage.s3.path.style.access.enabled")
        if path_style is not None and path_style.lower() not in ("true", "false"):
            raise S3ConfigError(f"{prefix}storage.s3.path.style.access.enabled must be true or false, "
                                f"got {path_style!r}")
        storage_class = get("storage.s3.storage.class") or "STANDARD"
        if storage_class not in STORAGE_CLASSES:
            raise S3ConfigError(f"{prefix}storage.s3.storage.class={storage_class} is not one of S3's storage "
                                f"classes ({', '.join(sorted(STORAGE_CLASSES))})")
        bucket = get("storage.s3.bucket.name")
        if bucket is None:
            raise S3ConfigError(f"{prefix}storage.s3.bucket.name is required when remote.log.storage.system.enable "
                                "is true")
        return cls(bucket=bucket, key_prefix=properties.get(prefix + "key.prefix", ""),
                   region=get("storage.s3.region") or "us-east-1", endpoint_url=get("storage.s3.endpoint.url"),
                   access_key_id=get("storage.aws.access.key.id"),
                   secret_access_key=get("storage.aws.secret.access.key"),
                   part_size=number("storage.s3.multipart.upload.part.size", DEFAULT_PART_SIZE, MIN_PART_SIZE),
                   call_timeout_ms=number("storage.s3.api.call.timeout.ms", 30_000, 1),
                   attempts=number("storage.retries", 8, 1),
                   upload_concurrency=number("storage.s3.upload.concurrency", 4, 1),
                   path_style=None if path_style is None else path_style.lower() == "true",
                   storage_class=storage_class)  # fmt: skip


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, botocore.exceptions.ClientError):
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return str(error.get("Code")) in TRANSIENT_CODES or status >= 500 or status == 429
    return isinstance(exc, TRANSIENT_EXCEPTIONS)


def error_code(exc: BaseException) -> str:
    if isinstance(exc, botocore.exceptions.ClientError):
        return str(exc.response.get("Error", {}).get("Code"))
    return type(exc).__name__


class S3Client:
    """A boto3 S3 client with `call`'s retries; thread-safe (boto3 clients are)."""

    def __init__(self, config: S3Config, sleep: Callable[[float], None] = time.sleep,
                 rng: random.Random | None = None) -> None:
        self.config = config
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._closed = False
        self.stats: Counter[str] = Counter()
        """Requests by operation ("get_object", ...); "retries" / "retries.<code>" for transient faults
        retried; "errors" / "errors.<operation>" for calls that failed for good; "bytes_sent" (object
        bodies put) and "bytes_received" (object bodies got). The broker exports them (`remote_metrics`)."""
        timeout = config.call_timeout_ms / 1000
        addressing = {None: "auto", True: "path", False: "virtual"}[config.path_style]
        self.s3 = boto3.client(
            "s3", region_name=config.region, endpoint_url=config.endpoint_url,
            aws_access_key_id=config.access_key_id, aws_secret_access_key=config.secret_access_key,
            config=botocore.config.Config(retries={"total_max_attempts": 1, "mode": "standard"},
                                          connect_timeout=timeout, read_timeout=timeout, max_pool_connections=32,
                                          s3={"addressing_style": addressing},
                                          request_checksum_calculation="when_required",
                                          response_checksum_validation="when_required"),
        )  # fmt: skip

    def call(self, operation: str, key: str, attempt: Callable[[], T]) -> T:
        """Run `attempt` (one S3 call and reading its answer) until it succeeds, retrying transient
        faults with exponential backoff and full jitter; raises RemoteStorageError naming the
        bucket and key for a permanent fault or when the attempts run out (then retriable)."""
        where = f"s3://{self.config.bucket}/{key}"
        for number in range(1, self.config.attempts + 1):
            if self._closed and number > 1:  # `close`: the attempt under way was the last
                raise RemoteStorageError(f"{operation} {where}: not retried, the client is closed", retriable=True)
            self._count(operation)
            try:
                return attempt()
            except Exception as exc:
                code = error_code(exc)
                if not is_transient(exc) or number == self.config.attempts:
                    self._count("errors", f"errors.{operation}")
                if not is_transient(exc):
                    raise RemoteStorageError(f"{operation} {where} failed: {code}: {exc}") from exc
                if number == self.config.attempts:
                    raise RemoteStorageError(f"{operation} {where} failed {number} times, last with {code}: {exc}",
                                             retriable=True) from exc
                self._count("retries", f"retries.{code}")
                cap = min(self.config.backoff_max_ms, self.config.backoff_base_ms * 2 ** (number - 1))
                delay = self._rng.uniform(0, cap) / 1000
                logger.info("%s %s: %s (attempt %d of %d), retrying in %.0f ms", operation, where, code, number,
                            self.config.attempts, delay * 1000)  # fmt: skip
                self._sleep(delay)
        raise AssertionError("unreachable")

    def close(self) -> None:
        """No attempt starts after this (from any thread). A stopping broker shuts its tier's pools down
        without waiting, but Python joins a pool's running workers at exit (concurrent.futures'
        `_python_exit`, daemon or not): a call in its retries held the exit for up to `attempts` call
        timeouts plus backoffs (minutes); now for at most the attempt under way (`call_timeout_ms`)."""
        self._closed = True

    def snapshot(self) -> dict[str, int]:
        """A copy of `stats` (safe to read from another thread, as the metrics server does)."""
        with self._lock:
            return dict(self.stats)

    def _count(self, *names: str, amount: int = 1) -> None:
        with self._lock:
            for name in names:
                self.stats[name] += amount

    # -- the operations tiered storage uses ----------------------------------------------------------

    def put(self, key: str, body: bytes) -> None:
        self.call("put_object", key, lambda: self.s3.put_object(Bucket=self.config.bucket, Key=key, Body=body,
                                                                 StorageClass=self.config.storage_class))
        self._count("bytes_sent", amount=len(body))

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        """The object, or bytes [start, end) of it; the answer's length is checked against what
        S3 said it sent (a body cut short is a transient fault, retried)."""
        kwargs: dict[str, Any] = {"Bucket": self.config.bucket, "Key": key}
        if start is not None:
            kwargs["Range"] = f"bytes={start}-{'' if end is None else end - 1}"

        def attempt() -> bytes:
            answer = self.s3.get_object(**kwargs)
            data = answer["Body"].read()
            if len(data) != answer["ContentLength"]:
                raise botocore.exceptions.IncompleteReadError(actual_bytes=len(data),
                                                              expected_bytes=answer["ContentLength"])
            return data

        data = self.call("get_object", key, attempt)
        self._count("bytes_received", amount=len(data))
        return data

    def get_pieces(self, key: str, start: int, end: int, piece_size: int) -> Iterator[bytes]:
        """Bytes [start, end) of the object with one ranged GET, handed over `piece_size` bytes at a
        time as the body arrives (the last piece shorter), so the caller can use the first before
        the last has come. A body that breaks off (a transient fault) is asked for again from where
        it broke, `attempts` times at most; a GET that fails is retried as `call` does."""
        if piece_size <= 0 or not 0 <= start <= end:
            raise ValueError(f"pieces of {piece_size} bytes of bytes [{start}, {end}) of {key}")
        position, breaks = start, 0
        while position < end:
            body = self.call("get_object", key, functools.partial(self._open_range, key, position, end))
            try:
                while position < end:
                    want = min(piece_size, end - position)
                    try:
                        data = body.read(want)
                        if len(data) != want:
                            raise botocore.exceptions.IncompleteReadError(actual_bytes=len(data), expected_bytes=want)
                    except Exception as exc:
                        breaks += 1
                        where = f"s3://{self.config.bucket}/{key} at byte {position}"
                        if not is_transient(exc) or breaks >= self.config.attempts:
                            self._count("errors", "errors.get_object")
                            raise RemoteStorageError(f"get_object {where}: the body broke off ({breaks} times), "
                                                     f"last with {error_code(exc)}: {exc}",
                                                     retriable=is_transient(exc)) from exc
                        self._count("retries", f"retries.{error_code(exc)}")
                        logger.info("get_object %s: the body broke off with %s: asking for the rest again", where,
                                    error_code(exc))
                        break
                    self._count("bytes_received", amount=want)
                    position += want
                    yield data
            finally:
                body.close()

    def _open_range(self, key: str, start: int, end: int) -> Any:
        """The body of a GET of bytes [start, end), once S3 says it holds that many."""
        answer = self.s3.get_object(Bucket=self.config.bucket, Key=key, Range=f"bytes={start}-{end - 1}")
        if answer["ContentLength"] != end - start:
            answer["Body"].close()
            raise RemoteStorageError(f"s3://{self.config.bucket}/{key}: asked for bytes [{start}, {end}), "
                                     f"the answer holds {answer['ContentLength']}")
        return answer["Body"]

    def upload_file(self, key: str, path: str, size: int) -> None:
        """A file as one PUT, or in `part_size` parts above that, `upload_concurrency` at a time
        (each part retried on its own; an upload that fails for good is aborted)."""
        part_size = self.config.part_size
        if size <= part_size:
            with open(path, "rb") as file:
                body = file.read()
            if len(body) != size:
                raise RemoteStorageError(f"{path} holds {len(body)} bytes, not the {size} expected")
            self.put(key, body)
            return
        bucket = self.config.bucket
        upload = self.call("create_multipart_upload", key,
                           lambda: self.s3.create_multipart_upload(
                               Bucket=bucket, Key=key, StorageClass=self.config.storage_class))["UploadId"]
        positions = list(range(0, size, part_size))

        def send(number: int) -> dict[str, Any]:
            position = positions[number - 1]
            with open(path, "rb") as file:
                file.seek(position)
                body = file.read(min(part_size, size - position))
            if len(body) != min(part_size, size - position):
                raise RemoteStorageError(f"{path} ended at byte {position + len(body)}, not {size}")
            answer = self.call("upload_part", key, lambda: self.s3.upload_part(
                Bucket=bucket, Key=key, UploadId=upload, PartNumber=number, Body=body))
            self._count("bytes_sent", amount=len(body))
            return {"PartNumber": number, "ETag": answer["ETag"]}

        try:
            with ThreadPoolExecutor(max_workers=min(self.config.upload_concurrency, len(positions)),
                                    thread_name_prefix="s3-part") as parts_pool:
                parts = list(parts_pool.map(send, range(1, len(positions) + 1)))
            self.call("complete_multipart_upload", key, lambda: self.s3.complete_multipart_upload(
                Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": parts}))
        except BaseException:
            try:
                self.s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload)
            except Exception as exc:  # the bucket's lifecycle rules clean up what this leaves
                logger.warning("aborting the multipart upload of s3://%s/%s: %s", bucket, key, exc)
            raise

    def delete(self, keys: list[str]) -> None:
        """Delete these keys (missing ones are fine), 1000 per request."""
        bucket = self.config.bucket
        for first in range(0, len(keys), 1000):
            chunk = keys[first:first + 1000]

            def attempt(chunk: list[str] = chunk) -> None:
                answer = self.s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in chunk],
                                                                       "Quiet": True})
                errors = answer.get("Errors") or []
                if errors:
                    first_error = errors[0]
                    raise botocore.exceptions.ClientError(
                        {"Error": {"Code": first_error.get("Code"), "Message": first_error.get("Message")}},
                        "DeleteObjects")
            self.call("delete_objects", chunk[0], attempt)

    def list_keys(self, prefix: str) -> list[str]:
        """Every key under `prefix`, in key order."""
        keys: list[str] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.config.bucket, "Prefix": prefix}
            if token:
                kwargs["ContinuationToken"] = token
            answer = self.call("list_objects_v2", prefix, lambda kwargs=kwargs: self.s3.list_objects_v2(**kwargs))
            keys += [entry["Key"] for entry in answer.get("Contents", ())]
            if not answer.get("IsTruncated"):
                return keys
            token = answer.get("NextContinuationToken")
