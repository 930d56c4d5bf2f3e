"""Start nodes as real processes on 127.0.0.1, the way a user runs them: shared by tests and demos.

`quorum local-cluster` grows out of this as the quorum lands; today it starts the standalone node.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

LISTENING = re.compile(r"listening on (?P<host>[\d.]+):(?P<port>\d+)")


@dataclass
class RunningNode:
    process: subprocess.Popen[str]
    host: str
    port: int
    output: list[str]

    def wait_for_output(self, pattern: str, timeout: float = 10.0) -> str:
        """The first line matching `pattern` the node has printed, waiting for it if need be."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.output):
                if re.search(pattern, line):
                    return line
            time.sleep(0.05)
        raise AssertionError(f"no output line matches {pattern!r}:\n" + "".join(self.output[-20:]))

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def start_standalone(*topics: str, timeout: float = 30.0) -> RunningNode:
    """`quorum standalone` on a free port, returned once it prints the address it listens on."""
    args = [sys.executable, "-m", "quorum.cli", "standalone", "--listen", "127.0.0.1:0"]
    for topic in topics:
        args += ["--topic", topic]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    output: list[str] = []
    deadline = time.monotonic() + timeout
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        output.append(line)
        match = LISTENING.search(line)
        if match:
            threading.Thread(target=_drain, args=(process, output), daemon=True).start()
            return RunningNode(process, match["host"], int(match["port"]), output)
    process.kill()
    raise RuntimeError("quorum standalone did not start:\n" + "".join(output))


def _drain(process: subprocess.Popen[str], output: list[str]) -> None:
    """Keep reading the node's output so that a full pipe never blocks it, and keep it for asserts."""
    assert process.stdout is not None
    for line in process.stdout:
        output.append(line)
