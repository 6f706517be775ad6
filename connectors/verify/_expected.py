"""The expected records of a check whose input is not a Kafka topic: ids from a range, a file, a query.

A query fed by Spark's ``rate`` source, by files or by a table has no input topic to read
back. Its expected set is given as ids instead: each id becomes a :class:`Record` of the
pseudo topic :data:`EXPECTED` holding the id as its value, and :func:`with_expected` wraps
an identity function so that such a record is identified by that id and every other
record (the output's) as before. An expected record is a key group of its own: with no
input order there is no order to check, so every check but the order check applies.

Ids are compared as text: ``7`` from a range, a file, a query or a JSON field is ``"7"``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from connectors.verify._errors import IdentityOptionError
from connectors.verify._records import IdentityFn, Record, RecordIdentity

# The topic name of an expected record (no Kafka topic can be named so: '<' is refused).
EXPECTED = "<expected>"


def expected_records(ids: Iterable[object]) -> list[Record]:
    """Return one expected :class:`Record` per id, in the order given (offsets 0, 1, ...)."""
    return [
        Record(topic=EXPECTED, partition=0, offset=offset, key=None, value=str(rid).encode())
        for offset, rid in enumerate(ids)
    ]


def id_range(text: str) -> range:
    """Return the ids of ``START:END`` (``END`` excluded: ``0:3`` is 0, 1, 2).

    Raises:
        IdentityOptionError: not two integers with ``START <= END``.

    """
    start, sep, end = text.partition(":")
    try:
        bounds = range(int(start), int(end)) if sep else None
    except ValueError:
        bounds = None
    if bounds is None or int(start) > int(end):
        msg = f"an expected range is START:END with integers START <= END (END excluded), got {text!r}"
        raise IdentityOptionError(msg)
    return bounds


def ids_in_file(path: str) -> list[str]:
    """Return the ids of a text file, one per line (blank lines skipped, spaces trimmed).

    Raises:
        IdentityOptionError: the file cannot be read.

    """
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        msg = f"cannot read the expected ids from {path!r}: {exc.strerror or exc}"
        raise IdentityOptionError(msg) from None
    return [line.strip() for line in lines if line.strip()]


def ids_of_query(dsn: str, query: str) -> list[str]:
    """Return the first column of every row ``query`` returns in PostgreSQL, as text.

    Raises:
        psycopg.Error: the database cannot be reached, or refused the query.

    """
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return [str(row[0]) for row in conn.execute(query.encode()).fetchall()]


def with_expected(identity: IdentityFn) -> IdentityFn:
    """Return ``identity`` for records of a topic, the id (own key group) for expected ones."""

    def identify(record: Record) -> RecordIdentity:
        if record.topic == EXPECTED and record.value is not None:
            rid = record.value.decode()
            return RecordIdentity(id=rid, key=f"\0{rid}")
        return identity(record)

    return identify
