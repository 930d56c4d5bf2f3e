"""`freeze_startup_heap`: what a node holds once started is left out of the collector's passes, in a
child interpreter (freezing this one would keep the test process's cyclic garbage for good)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import gc
    from quorum.server.heap import freeze_startup_heap
    held = [[n] for n in range(50_000)]  # a start-up heap (lists: always tracked by the collector)
    frozen = freeze_startup_heap()
    scanned = {id(o) for o in gc.get_objects()}
    later = [[n] for n in range(10)]
    scanned_after = {id(o) for o in gc.get_objects()}
    print(frozen >= 50_000, any(id(o) in scanned for o in held), all(id(o) in scanned_after for o in later))
""")


def test_the_startup_heap_is_frozen_and_what_comes_later_is_still_collected() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, check=True)
    frozen_enough, held_scanned, later_scanned = out.stdout.split()
    assert frozen_enough == "True", out.stdout
    assert held_scanned == "False", "objects alive at the freeze are still walked by every full collection"
    assert later_scanned == "True", "objects made after the freeze must stay collectable"
