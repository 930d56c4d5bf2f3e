"""`./run test` writes pytest's assertion-rewrite cache before the workers start
(tests/support/rewrite_cache.py): the workers must load from it exactly what pytest would have rewritten
itself, asserts with pytest's explanations included, and never a stale module."""

from __future__ import annotations

from pathlib import Path
from types import CodeType

import pytest
from _pytest.assertion.rewrite import _read_pyc, _rewrite_test

from tests.support.rewrite_cache import cached_pyc, rewritten_modules, write_cache


def _shape(code: CodeType) -> tuple:
    consts = tuple(_shape(const) if isinstance(const, CodeType) else const for const in code.co_consts)
    return code.co_code, code.co_names, code.co_varnames, consts


def _module(directory: Path, body: str) -> Path:
    module = directory / "test_sample.py"
    module.write_text(body)
    return module


def test_pytest_loads_from_the_cache_its_own_rewrite(tmp_path: Path, pytestconfig: pytest.Config) -> None:
    module = _module(tmp_path, "def test_it():\n    seen = [1, 2]\n    assert seen == [1, 3]\n")
    assert write_cache(module)
    cached = _read_pyc(module, cached_pyc(module))
    assert cached is not None, "pytest refuses the cache it would read"
    assert _shape(cached) == _shape(_rewrite_test(module, pytestconfig)[1])
    namespace: dict[str, object] = {}
    exec(cached, namespace)
    with pytest.raises(AssertionError, match=r"\[1, 2\] == \[1, 3\]"):  # a bare assert says nothing
        namespace["test_it"]()  # type: ignore[operator]


def test_a_changed_module_is_rewritten_again(tmp_path: Path) -> None:
    module = _module(tmp_path, "def test_it():\n    assert 1\n")
    assert write_cache(module)
    _module(tmp_path, "def test_it():\n    assert 2 == 3, 'changed'\n")
    assert write_cache(module)
    cached = _read_pyc(module, cached_pyc(module))
    assert cached is not None
    namespace: dict[str, object] = {}
    exec(cached, namespace)
    with pytest.raises(AssertionError, match=r"changed\nassert 2 == 3"):
        namespace["test_it"]()  # type: ignore[operator]


def test_the_modules_are_those_pytest_rewrites(tmp_path: Path) -> None:
    for name in ("test_a.py", "b_test.py", "conftest.py", "helpers.py", "__pycache__/test_c.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("")
    assert [path.name for path in rewritten_modules(tmp_path)] == ["b_test.py", "conftest.py", "test_a.py"]
