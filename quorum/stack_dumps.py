"""`kill -USR1 <pid>` prints every Python thread's stack to stderr and the process goes on: where a
node or a replicator that went silent is waiting, without stopping it (`LocalCluster.dump_stacks`, the
test suite's failure hook and the mirror flows tests ask for it)."""

from __future__ import annotations

import contextlib
import faulthandler
import io
import signal


def print_stacks_on_sigusr1() -> None:
    """Register the dump. Only where stderr is a file: a CLI's main() called in-process (its own tests,
    under pytest's capture) has none to write to, and then nothing is registered."""
    with contextlib.suppress(io.UnsupportedOperation, ValueError):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
