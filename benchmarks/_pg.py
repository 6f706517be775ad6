"""The PostgreSQL server of a benchmark, and statement durations from its log.

:func:`server` yields a given DSN, else starts a private embedded server (optionally with
more settings, e.g. ``log_min_duration_statement=0`` to log every statement's duration) and
yields its DSN and log file. :func:`statement_ms` reads the durations of statements that
start with a prefix back from such a log.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

# A duration line of log_min_duration_statement: simple ("statement") or extended protocol
# ("execute <name>").
_DURATION = re.compile(r"duration: ([0-9.]+) ms\s+(?:statement|execute [^:]*): (.*)$")


@contextlib.contextmanager
def server(dsn: str | None, **settings: str) -> Iterator[tuple[str, Path | None]]:
    """Yield ``(dsn, None)`` if a DSN is given, else an embedded server's ``(dsn, log file)``."""
    if dsn:
        yield dsn, None
        return
    from connectors.testing.postgres import EmbeddedPostgres

    with EmbeddedPostgres(settings=settings) as pg:
        yield pg.dsn, pg.log_file


def statement_ms(log: Path, prefix: str) -> list[tuple[str, float]]:
    """``(statement, milliseconds)`` of every logged statement starting with ``prefix``."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        found = _DURATION.search(line)
        if found and found.group(2).startswith(prefix):
            out.append((found.group(2), float(found.group(1))))
    return out
