"""A node's start-up heap, kept out of the cyclic garbage collector's full passes.

A node holds some 50,000 container objects once it has started (the protocol schemas and their
codecs, the replayed image, the handlers), and CPython's full collection walks all of them each
time enough objects have survived into the oldest generation: here every 0.7 s or so on an idle
controller (a long-polling Fetch's objects live half a second and are promoted), 20-26 ms each with
the event loop stopped. One of those landing in a failover held the successor's EndQuorumEpoch for
that long (measured with a trace of the loop's lag and `gc.callbacks`); a broker's would sit in
a produce's latency the same way. `gc.freeze()` (Python 3.7+, what Instagram's servers do after
start-up) moves every object alive now to a permanent generation that collections do not scan;
reference counting still frees them, so only cyclic garbage among them stays (start-up's, once).
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)


def freeze_startup_heap() -> int:
    """Collect once, then leave every object alive now out of later collections; how many were."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("%d start-up objects left out of garbage collection (gc.freeze)", frozen)
    return frozen
