"""The interpreter Spark's Python processes run (PYSPARK_PYTHON), importing pyspark from its installed package.

Why: Spark puts `$SPARK_HOME/python/lib/pyspark.zip` (and py4j's zip) first on the PYTHONPATH of every
Python process it starts, and with a pip-installed PySpark SPARK_HOME is that installed package. Python
imports modules from a zip without ever caching their bytecode, so each of those processes compiles
pyspark from source: about 0.9 CPU-s more than importing the installed package's cached bytecode
(1.3 against 0.4 CPU-s here for what a streaming source's process imports). Spark starts one such
process for every streaming query that reads a Python data source (its planning runs there) and one
daemon per executor, so a query's start pays it each time.

`python_executable()` returns a small shell launcher that removes exactly those two zips from PYTHONPATH
when they are the zips shipped inside the same installed PySpark this interpreter imports (the same
files, so the same code), and runs this interpreter. Every other PYTHONPATH entry (a Spark
distribution's own zip, `--py-files`, the user's) is left as it is.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path


def shipped_zips() -> list[str]:
    """The zips inside this interpreter's installed pyspark that Spark prepends to PYTHONPATH, when the
    installed pyspark and py4j are importable without them."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None or importlib.util.find_spec("py4j") is None:
        return []
    lib = Path(spec.origin).parent / "python" / "lib"
    if ".zip" in str(lib):  # this interpreter already imports pyspark from a zip: nothing to gain
        return []
    zips = {str(path) for path in lib.glob("*.zip")}
    return sorted(zips | {os.path.realpath(path) for path in zips})  # SPARK_HOME may be either spelling


def launcher_text(interpreter: str, zips: list[str]) -> str:
    """The launcher: PYTHONPATH without `zips` (entries compared whole), then `interpreter` with the arguments."""
    drop = " ".join(f"'{path}'" for path in zips)
    return (
        "#!/bin/sh\n"
        "# client_epochs.spark.python_exec: PySpark's own zips off PYTHONPATH (see its docstring)\n"
        "set -f\n"
        "kept=''\n"
        "old_ifs=$IFS; IFS=:\n"
        "for entry in $PYTHONPATH; do\n"
        "  for zip in " + drop + "; do [ \"$entry\" = \"$zip\" ] && continue 2; done\n"
        "  kept=\"${kept:+$kept:}$entry\"\n"
        "done\n"
        "IFS=$old_ifs\n"
        "if [ -n \"$kept\" ]; then export PYTHONPATH=\"$kept\"; else unset PYTHONPATH; fi\n"
        f"exec '{interpreter}' \"$@\"\n"
    )


def python_executable(interpreter: str = sys.executable) -> str:
    """A PYSPARK_PYTHON for `interpreter`: the launcher above (written once per interpreter and pyspark
    install to the temporary directory), or `interpreter` itself when there is nothing to drop or no
    POSIX shell."""
    zips = shipped_zips()
    if not zips or os.name != "posix" or any("'" in path for path in [interpreter, *zips]):
        return interpreter
    text = launcher_text(interpreter, zips)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"kafka-epochs-python-{os.getuid()}-{digest}"
    if not path.exists() or path.read_text() != text:
        partial = path.with_name(f"{path.name}.{os.getpid()}")
        partial.write_text(text)
        partial.chmod(0o755)
        partial.replace(path)
    return str(path)
