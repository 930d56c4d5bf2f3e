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
