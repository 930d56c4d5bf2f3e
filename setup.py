"""The one thing pyproject.toml cannot say on setuptools 65: the compiled record walk.

`quorum.wire._walk` (`quorum/wire/_walk.c`, plain CPython C API) is built by every install,
editable ones included (`./run` makes sure a C compiler and Python's headers are there);
`quorum.wire.records` falls back to its Python walk when it is missing (see
`quorum/wire/compiled_walk.py`).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("quorum.wire._walk", ["quorum/wire/_walk.c"], extra_compile_args=["-O2", "-Wall"])])
