"""`walk_path`: run a module's tests once with the compiled record walk and once with the Python one.

Module-scoped (hypothesis refuses function-scoped fixtures in its tests, and the switch needs no
reset between examples). The compiled run skips where the extension is not built; whether it is
built is `test_compiled_walk.py`'s business.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from quorum.wire import records
from quorum.wire.compiled_walk import load_compiled_walk


@pytest.fixture(scope="module", params=["compiled", "python"])
def walk_path(request: pytest.FixtureRequest) -> Iterator[str]:
    walk = None
    if request.param == "compiled":
        walk = load_compiled_walk()
        if walk is None:
            pytest.skip("quorum.wire._walk is not built (or QUORUM_PURE_PYTHON is set)")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(records, "_compiled_walk", walk)
        yield request.param
