"""What ``eos`` reads and changes in PostgreSQL, and the DSN, never shown with its password.

A sink's epoch log table, its markers (the idempotency table), its prepared transactions.

Imports psycopg (the ``postgres`` extra) only when used, so ``eos`` without the extra still
runs every Kafka command.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from connectors.ops._errors import UnknownSinkError, UsageError
from txn import EpochHistory, EpochLog

if TYPE_CHECKING:
    from connectors.postgres import Gid, PostgresSinkConfig
    from txn import Marker

# The environment variable holding the DSN when --dsn is not given (as the demo and tests use).
DSN_ENV = "POSTGRES_DSN"
DEFAULT_CONTROL_SCHEMA = "eos"
# libpq parameters that carry a secret: left out of every description of a DSN.
_SECRETS = frozenset({"password", "sslpassword"})
_SHOWN = ("host", "hostaddr", "port", "dbname", "user")
# Shortest password scrubbed from output wherever it appears (see secrets_of).
_MIN_SCRUBBED = 4


def _conninfo(dsn: str) -> dict[str, Any]:
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        return dict(conninfo_to_dict(dsn))
    except ProgrammingError:  # its message may quote the string, password included
        msg = (
            "--dsn (or $POSTGRES_DSN) is not a valid libpq connection string or "
            "postgresql:// URL, e.g. 'host=db dbname=app user=etl' (the value is not shown: "
            "it may hold a password)"
        )
        raise UsageError(msg) from None


def describe_dsn(dsn: str) -> str:
    """Return where ``dsn`` points (host, port, database, user), without any secret."""
    params = _conninfo(dsn)
    shown = [f"{k}={params[k]}" for k in _SHOWN if params.get(k)]
    return " ".join(shown) or "the libpq defaults"


def secrets_of(dsn: str | None) -> list[str]:
    """Return the strings no output may show: the DSN itself and its passwords."""
    if not dsn:
        return []
    try:
        found = [str(v) for k, v in _conninfo(dsn).items() if k in _SECRETS and v]
    except UsageError:
        found = re.findall(r"password\s*=\s*(\S+)", dsn) + re.findall(r"://[^:/@]*:([^@]+)@", dsn)
    # A very short password would blot out ordinary words; no output carries the DSN anyway.
    return [dsn, *(s for s in found if len(s) >= _MIN_SCRUBBED)]


@dataclass(frozen=True)
class PostgresRef:
    """A sink's state in one database: the epoch log table, markers, prepared transactions.

    ``sink_id`` names the log (a composite's log is under the composite's id); the markers
    and prepared transactions are read per sink id (a composite's members have their own).
    """

    dsn: str
    sink_id: str
    control_schema: str = DEFAULT_CONTROL_SCHEMA

    @property
    def where(self) -> str:
        """The epoch log's place, for messages and output (no password)."""
        return f"PostgreSQL table {self.control_schema}.epoch_log at {describe_dsn(self.dsn)}"

    def config(self, sink_id: str | None = None) -> PostgresSinkConfig:
        """Return a sink config for the log and the control tables (its table is not used)."""
        from connectors.postgres import PostgresSinkConfig
        from connectors.postgres._control import LOG_TABLE

        describe_dsn(self.dsn)  # a UsageError that never shows the value
        return PostgresSinkConfig.build(
            dsn=self.dsn,
            table=LOG_TABLE,
            sink_id=sink_id or self.sink_id,
            control_schema=self.control_schema,
        )

    def read_log(self) -> EpochHistory:
        """Read the history without taking the log over (a running sink keeps it).

        Raises:
            UnknownSinkError: the table holds no record of the sink.

        """
        from connectors.postgres import PostgresEpochLog

        log = PostgresEpochLog(self.config(), read_only=True)
        try:
            history = log.load()
        finally:
            log.close()
        if not history.records and history.committed_through is None:
            msg = (
                f"sink {self.sink_id!r} is unknown here: the {self.where} holds no record of "
                "it. Check the sink id and --control-schema (the sink's control_schema "
                "option); a sink with a file log needs --epoch-log PATH, a Kafka sink's log "
                "is read without --dsn"
            )
            raise UnknownSinkError(msg)
        return history

    def open_log(self) -> EpochLog:
        """Open the log for appending: takes it over (refused while a coordinator holds it)."""
        from connectors.postgres import PostgresEpochLog

        return PostgresEpochLog(self.config())

    def markers(self, sink_id: str) -> dict[int, Marker]:
        """Return the committed markers of ``sink_id`` (the idempotency table), by partition."""
        from connectors.postgres import read_markers

        with self._connect() as conn:
            if not _has_markers(conn, self.control_schema):
                return {}
            return read_markers(conn, self.control_schema, sink_id)

    def prepared(self, sink_id: str) -> list[Gid]:
        """Return the prepared transactions of ``sink_id`` here (``pg_prepared_xacts``)."""
        from connectors.postgres import list_prepared

        with self._connect() as conn:
            return list_prepared(conn, sink_id)

    def finish(self, gids: list[tuple[Gid, bool]]) -> None:
        """COMMIT PREPARED (True) or ROLLBACK PREPARED (False) each gid; a gone one is fine."""
        from connectors.postgres._twophase import commit_prepared, rollback_prepared

        with self._connect() as conn:
            for gid, commit in gids:
                (commit_prepared if commit else rollback_prepared)(conn, gid)

    def input_offsets(self, sink_id: str) -> tuple[int, dict[tuple[str, int], int]] | None:
        """Return the input offsets committed with the sink's rows (or None)."""
        from connectors.postgres._input_offsets import read_input_offsets

        with self._connect() as conn:
            return read_input_offsets(conn, self.control_schema, sink_id)

    def _connect(self) -> Any:
        from connectors.postgres._connect import connect

        return connect(self.config(), "eos", autocommit=True)


def _has_markers(conn: Any, schema: str) -> bool:
    from connectors.postgres._control import MARKER_TABLE

    row = conn.execute(
        "SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = %s AND tablename = %s",
        (schema, MARKER_TABLE),
    ).fetchone()
    return row is not None and row[0] == 1
