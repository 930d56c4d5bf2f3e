"""DESIGN.md's arrows between the packages, checked on the source (every import statement, function-level
ones included): `client_epochs` uses only `quorum.wire` of `quorum` (its users install an SDK, not a
broker), and `quorum` reaches `tiered_follower` only from its entry point (`quorum/cli.py` composes them).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def imports(package: str, root: Path = ROOT) -> list[tuple[str, int, str]]:
    """(file, line, imported module) of every absolute import in `package`."""
    found = []
    for path in sorted((root / package).rglob("*.py")):
        name = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                found += [(name, node.lineno, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.append((name, node.lineno, node.module))
    return found


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_client_epochs_imports_only_the_wire_layer_of_quorum():
    wrong = [f"{path}:{line}: {module}" for path, line, module in imports("client_epochs")
             if (within(module, "quorum") and not within(module, "quorum.wire")) or within(module, "tiered_follower")]
    assert not wrong, "client_epochs may import only quorum.wire of quorum:\n" + "\n".join(wrong)


def test_quorum_imports_tiered_follower_only_from_its_entry_point():
    wrong = [f"{path}:{line}: {module}" for path, line, module in imports("quorum")
             if within(module, "tiered_follower") and path != "quorum/cli.py"]
    assert not wrong, "quorum reaches tiered_follower only through quorum/cli.py:\n" + "\n".join(wrong)


def test_the_scan_sees_function_level_and_plain_imports(tmp_path):
    """A violation hidden in a function (the SDK imports lazily in places) is found, with its line."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("import quorum.log\n\n\ndef f():\n    from quorum.security.sasl import "
                                             "SaslSession\n    from . import sibling\n", encoding="utf-8")
    assert imports("pkg", tmp_path) == [("pkg/mod.py", 1, "quorum.log"), ("pkg/mod.py", 5, "quorum.security.sasl")]


def import_graph(packages: tuple[str, ...], root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the project's modules it imports (TYPE_CHECKING and function-level ones included:
    a circle hidden behind either still ties the modules' insides to each other)."""
    modules = {path.relative_to(root).with_suffix("").as_posix().replace("/", ".").removesuffix(".__init__")
               for package in packages for path in (root / package).rglob("*.py")}
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for package in packages:
        for path, _, imported in imports(package, root):
            source = path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
            if imported in modules and imported != source:
                graph[source].add(imported)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = stack[stack.index(node):]
                    del stack[stack.index(node):]
                    if len(group) > 1:
                        found.append(sorted(group))
            elif target not in index:
                index[target] = low[target] = len(index)
                stack.append(target)
                work.append((target, iter(sorted(graph[target]))))
            elif target in stack:
                low[node] = min(low[node], index[target])
    return found


def test_no_modules_import_each_other_in_a_circle():
    """A module that imports another which imports it back cannot be read, tested or changed alone
    (the partition, its read-path view and the remote tier once did; the Spark source's options and
    planning did)."""
    found = circles(import_graph(("quorum", "tiered_follower", "client_epochs")))
    assert not found, "modules importing each other:\n" + "\n".join(" <-> ".join(group) for group in found)


def test_the_circle_check_finds_one_behind_type_checking(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "pkg" / "a.py").write_text("import pkg.b\n", encoding="utf-8")
    hidden = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.c import C\n"
    (tmp_path / "pkg" / "b.py").write_text(hidden, encoding="utf-8")
    (tmp_path / "pkg" / "c.py").write_text("from pkg.a import A\n", encoding="utf-8")
    (tmp_path / "pkg" / "d.py").write_text("import pkg.a\n", encoding="utf-8")
    assert circles(import_graph(("pkg",), tmp_path)) == [["pkg.a", "pkg.b", "pkg.c"]]
