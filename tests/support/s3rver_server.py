"""s3rver, a second and independent S3 implementation beside moto, as a process on 127.0.0.1.

moto and s3rver are written apart (Python and Node), so a behaviour of the tier that passes on
both leans on S3's API, not on one fake's quirks. s3rver knows one account (access key S3RVER;
it refuses another key id, but leaves SigV4 signatures unchecked: its source says so), keeps
objects in a directory, and is addressed path-style here. It is
pinned in `tests/support/s3rver/package.json` and installed by `./run test` (`npm ci`).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from tiered_follower.embedded_s3 import EmbeddedS3

PACKAGE = Path(__file__).parent / "s3rver"
BINARY = PACKAGE / "node_modules" / ".bin" / "s3rver"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


class S3rverProcess:
    """One s3rver process and its data directory; `stop` ends it by its pid."""

    def __init__(self) -> None:
        if not BINARY.exists():
            raise RuntimeError(f"{BINARY} is missing: run `npm ci --prefix {PACKAGE}` (./run test does)")
        self._data = tempfile.TemporaryDirectory(prefix="s3rver-")
        self.process = subprocess.Popen([str(BINARY), "-d", self._data.name, "-a", "127.0.0.1", "-p", "0"],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
        self.output: list[str] = []
        found = threading.Event()
        self.port = 0

        def read() -> None:  # s3rver logs every request: read all of it, or its pipe fills
            assert self.process.stdout is not None
            for line in self.process.stdout:
                self.output.append(line)
                match = re.search(r"S3rver listening on 127\.0\.0\.1:(\d+)", line)
                if match and not found.is_set():
                    self.port = int(match.group(1))
                    found.set()

        threading.Thread(target=read, name="s3rver-output", daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not found.wait(0.1):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"s3rver did not say it was listening within {START_TIMEOUT_S:g} s "
                    f"(exit code {self.process.returncode}): {''.join(self.output)[-2000:]}"
                )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT_S)
        self._data.cleanup()


def start_s3rver() -> EmbeddedS3:
    process = S3rverProcess()
    return EmbeddedS3(
        f"http://127.0.0.1:{process.port}", process, access_key="S3RVER", secret_key="S3RVER", name="s3rver"
    )
