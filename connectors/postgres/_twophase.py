"""PostgreSQL two-phase commit: the transaction id scheme and idempotent helpers.

Transaction id (gid) of write partition ``p`` of attempt ``a`` of epoch ``e`` of sink ``s``::

    eos:<s>:<e>:<a>:<p>

at most 4 + 64 + 3 * 20 + 3 = 131 bytes (PostgreSQL allows 199). Sink ids hold no colon,
so :func:`parse_gid` splits it back exactly; a gid of another sink or application never
parses as this sink's.

* :func:`prepare` ends the caller's transaction with ``PREPARE TRANSACTION`` (a failed
  PREPARE is a rollback);
* :func:`commit_prepared` / :func:`rollback_prepared` finish a gid from any session and
  return whether it existed (SQLSTATE 42704 ``undefined_object`` means it does not: already
  finished, or never prepared), so the caller can make them idempotent;
* :func:`list_prepared` lists this sink's rows of ``pg_prepared_xacts`` in this database;
* :func:`max_prepared_transactions` reads the server setting (0 disables 2PC).
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import errors, sql

from connectors.postgres._connect import Conn

GID_PREFIX = "eos"


@dataclass(frozen=True, order=True, kw_only=True)
class Gid:
    """The parts of one of this kit's transaction ids."""

    sink_id: str
    epoch: int
    attempt: int
    partition: int

    def __str__(self) -> str:
        return f"{GID_PREFIX}:{self.sink_id}:{self.epoch}:{self.attempt}:{self.partition}"


def gid_prefix(sink_id: str) -> str:
    """Prefix shared by every gid of ``sink_id``."""
    return f"{GID_PREFIX}:{sink_id}:"


def parse_gid(text: str) -> Gid | None:
    """Return the parts of ``text`` if it is a gid of this scheme, else None."""
    parts = text.split(":")
    if len(parts) != 5 or parts[0] != GID_PREFIX or not parts[1]:
        return None
    try:
        epoch, attempt, partition = (int(p) for p in parts[2:])
    except ValueError:
        return None
    if (
        min(epoch, attempt, partition) < 0
        or str(Gid(sink_id=parts[1], epoch=epoch, attempt=attempt, partition=partition)) != text
    ):
        return None
    return Gid(sink_id=parts[1], epoch=epoch, attempt=attempt, partition=partition)


def prepare(conn: Conn, gid: Gid) -> None:
    """End the open transaction of ``conn`` with PREPARE TRANSACTION under ``gid``."""
    conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(str(gid))))


def commit_prepared(conn: Conn, gid: Gid) -> bool:
    """COMMIT PREPARED ``gid`` on an autocommit connection; False if no such gid exists."""
    return _end_prepared(conn, "COMMIT PREPARED", gid)


def rollback_prepared(conn: Conn, gid: Gid) -> bool:
    """ROLLBACK PREPARED ``gid`` on an autocommit connection; False if no such gid exists."""
    return _end_prepared(conn, "ROLLBACK PREPARED", gid)


def _end_prepared(conn: Conn, statement: str, gid: Gid) -> bool:
    try:
        conn.execute(sql.SQL("{} {}").format(sql.SQL(statement), sql.Literal(str(gid))))
    except errors.UndefinedObject:
        return False
    return True


def list_prepared(conn: Conn, sink_id: str) -> list[Gid]:
    """Return the sink's prepared transactions in the connection's database, sorted."""
    prefix = gid_prefix(sink_id)
    rows = conn.execute(
        "SELECT gid FROM pg_prepared_xacts "
        "WHERE database = current_database() AND left(gid, length(%s)) = %s",
        (prefix, prefix),
    ).fetchall()
    found = (parse_gid(row[0]) for row in rows)
    return sorted(g for g in found if g is not None and g.sink_id == sink_id)


def max_prepared_transactions(conn: Conn) -> int:
    """Return the server's ``max_prepared_transactions`` (0: PREPARE TRANSACTION is disabled)."""
    row = conn.execute("SELECT current_setting('max_prepared_transactions')::int").fetchone()
    assert row is not None  # noqa: S101 - a SELECT of one value returns one row
    return int(row[0])
