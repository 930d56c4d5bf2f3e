"""The PYSPARK_PYTHON launcher: Spark's Python processes import pyspark from the installed package (whose
bytecode is cached) instead of the zip Spark puts first on their PYTHONPATH (compiled at every start),
and every other PYTHONPATH entry reaches the interpreter unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("pyspark")

from client_epochs.spark.python_exec import python_executable, shipped_zips  # noqa: E402

PROBE = (
    "import json, os, pyspark, py4j; "
    "print(json.dumps([os.environ.get('PYTHONPATH'), pyspark.__file__, py4j.__file__]))"
)


def run(executable: str, pythonpath: str) -> list[str | None]:
    env = {**os.environ, "PYTHONPATH": pythonpath}
    done = subprocess.run([executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def test_spark_processes_import_the_installed_pyspark_and_keep_every_other_path() -> None:
    zips = shipped_zips()
    assert any(z.endswith("pyspark.zip") for z in zips) and any("py4j" in z for z in zips)
    others = ["/opt/job/deps.zip", f"{zips[0]}.bak", "/path with space/lib"]
    as_spark_sets_it = os.pathsep.join([*zips[:2], *others])

    plain = run(sys.executable, as_spark_sets_it)
    assert ".zip" in plain[1]  # the plain interpreter compiles pyspark from Spark's zip

    path, pyspark_file, py4j_file = run(python_executable(), as_spark_sets_it)
    assert path == os.pathsep.join(others)  # only the shipped zips are gone, the rest in order
    assert ".zip" not in pyspark_file and ".zip" not in py4j_file


def test_a_pythonpath_of_only_the_shipped_zips_is_removed_whole() -> None:
    path, pyspark_file, _ = run(python_executable(), os.pathsep.join(shipped_zips()))
    assert path is None and ".zip" not in pyspark_file
