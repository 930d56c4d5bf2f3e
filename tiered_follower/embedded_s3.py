"""An S3 endpoint on 127.0.0.1 for tests, benchmarks and `quorum local-cluster --tiered`.

moto's `ThreadedMotoServer` is a real HTTP server speaking the S3 API (boto3 talks to it over
sockets exactly as to AWS), so what is tested is the wire path, not an in-process mock. moto is in
the `test` extra; the error says so when it is missing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import boto3

from quorum.net.planned_ports import planned_port

ACCESS_KEY = "quorum-local"
SECRET_KEY = "quorum-local-secret"
REGION = "us-east-1"


@dataclass
class EmbeddedS3:
    """A running S3 server on 127.0.0.1 (moto's here; the tests start s3rver the same way);
    `endpoint_url` is what brokers get as `rsm.config.storage.s3.endpoint.url`."""

    endpoint_url: str
    server: object
    """What `stop` stops (its `stop()`)."""
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    name: str = "moto"

    def stop(self) -> None:
        self.server.stop()  # type: ignore[attr-defined]

    def client(self) -> object:
        return boto3.client("s3", region_name=REGION, endpoint_url=self.endpoint_url,
                            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key)

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)  # type: ignore[attr-defined]

    def properties(self, bucket: str, key_prefix: str = "") -> dict[str, str]:
        """The broker settings that point tiered storage at this endpoint and bucket, with its credentials."""
        properties = s3_properties(self.endpoint_url, bucket, key_prefix)
        properties["rsm.config.storage.aws.access.key.id"] = self.access_key
        properties["rsm.config.storage.aws.secret.access.key"] = self.secret_key
        return properties


TIERED_DEV_DEFAULTS = {
    "remote.log.manager.task.interval.ms": "2000",
    "log.retention.check.interval.ms": "5000",
}
"""`quorum local-cluster --tiered`'s defaults (over Kafka's 30 s and 5 min), so uploads and local
retention show within seconds; `--set` overrides them."""


def s3_properties(endpoint_url: str, bucket: str, key_prefix: str = "",
                  embedded_credentials: bool = True) -> dict[str, str]:
    """The broker settings for tiered storage on `bucket` at `endpoint_url`; the embedded server's
    credentials unless `embedded_credentials` is off (boto3's own chain then)."""
    properties = {
        "remote.log.storage.system.enable": "true",
        "rsm.config.storage.s3.bucket.name": bucket,
        "rsm.config.storage.s3.endpoint.url": endpoint_url,
        "rsm.config.storage.s3.region": REGION,
        "rsm.config.key.prefix": key_prefix,
        "rsm.config.storage.s3.path.style.access.enabled": "true",  # a bucket name is no host name on 127.0.0.1
    }
    if embedded_credentials:
        properties["rsm.config.storage.aws.access.key.id"] = ACCESS_KEY
        properties["rsm.config.storage.aws.secret.access.key"] = SECRET_KEY
    return properties




def start_embedded_s3(port: int = 0) -> EmbeddedS3:
    """Start moto's S3 server on 127.0.0.1 (`port` 0 picks a free one)."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        raise RuntimeError("the embedded S3 needs moto's server: pip install 'moto[server]==5.2.5' "
                           "(it is in this project's `test` extra)") from exc
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port or planned_port(), verbose=False)
    server.start()
    host, bound = server.get_host_and_port()
    return EmbeddedS3(f"http://{host}:{bound}", server)
