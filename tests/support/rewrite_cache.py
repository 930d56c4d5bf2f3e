"""Writes pytest's assertion-rewrite cache for the test modules once, on every core, before the workers start.

Pytest rewrites each test module's asserts when it imports it (about 13 CPU-s for this suite) and caches
the result beside the module, but not under PYTHONDONTWRITEBYTECODE=1, which these machines set: each of
`./run test`'s three xdist workers rewrote every module again. Pytest still reads a valid cache whatever
that variable says, so writing it here leaves the workers only the reading.

The code is pytest's own (the pinned 9.0.3's `_rewrite_test` and `_write_pyc`); tests/test_rewrite_cache.py
fails if what pytest would load differs from what it rewrites itself. `python -m tests.support.rewrite_cache
[DIR]` (default: tests).
"""

from __future__ import annotations

import fnmatch
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from _pytest.assertion.rewrite import PYC_TAIL, _read_pyc, _rewrite_test, _write_pyc, get_cache_dir

# pytest's default python_files (pyproject.toml keeps it) and the conftest files it always rewrites
REWRITTEN = ("test_*.py", "*_test.py", "conftest.py")


class _NoTrace:
    """The `state` `_write_pyc` reports failures to; a failure only leaves that module to the workers."""

    @staticmethod
    def trace(message: str) -> None:
        del message


def cached_pyc(module: Path) -> Path:
    return get_cache_dir(module) / (module.name[:-3] + PYC_TAIL)


def rewritten_modules(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*.py")
                  if "__pycache__" not in path.parts and any(fnmatch.fnmatch(path.name, p) for p in REWRITTEN))


def write_cache(module: Path) -> bool:
    """Rewrites one module unless its cache is current; False when it could not be written."""
    pyc = cached_pyc(module)
    if _read_pyc(module, pyc) is not None:
        return True
    # config=None: no assertion-pass hook, as pytest's config here (enable_assertion_pass_hook unset)
    source_stat, code = _rewrite_test(module, None)  # type: ignore[arg-type]
    pyc.parent.mkdir(exist_ok=True)
    return _write_pyc(_NoTrace(), code, source_stat, pyc)  # type: ignore[arg-type]


def main(argv: list[str]) -> int:
    modules = rewritten_modules(Path(argv[0] if argv else "tests").resolve())
    with ProcessPoolExecutor(max_workers=os.cpu_count()) as pool:
        written = list(pool.map(write_cache, modules, chunksize=4))
    failed = [str(module) for module, ok in zip(modules, written, strict=True) if not ok]
    if failed:  # not fatal: pytest rewrites these in each worker as before
        print(f"rewrite cache not written for {len(failed)} modules: {', '.join(failed[:5])}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
