"""``eos`` on PostgreSQL sinks: their epoch log table, markers and prepared transactions.

:class:`PostgresAdmin` is the connector's admin interface (``_target.SinkAdmin``) over one
database and control schema; :class:`PostgresLog` a sink's epoch log table there. The DSN
is never shown with its password (:func:`describe_dsn`, :func:`secrets_of`).

What ``abort-lingering`` does with a prepared transaction is what the sink's own recovery
does (docs/architecture.md, section 2, ``Coordinator.recover()``): COMMIT PREPARED when the
log decided commit for that epoch and the transaction is of the plan's attempt (a logged
commit decision is never followed by an abort); ROLLBACK PREPARED otherwise (undecided,
decided abort, an older attempt, a committed epoch): :func:`commits`. The command takes
the log over first (``decides_by_log``), so no coordinator can log a decision meanwhile.

Imports psycopg (the ``postgres`` extra) only when used, so ``eos`` without the extra still
runs every Kafka command.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from connectors.ops._errors import UnknownSinkError, UsageError
from connectors.ops._result import UNAVAILABLE, USAGE, Result, checked
from connectors.verify import IdentityFn, Record, check_table
from txn import EpochHistory, EpochLog, EpochState, TxnCode, has_code

if TYPE_CHECKING:
    from connectors.postgres import PostgresSinkConfig
    from connectors.postgres._twophase import Gid
    from connectors.verify import HistoryLike
    from connectors.verify._table import OpFn
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


def commits(history: EpochHistory, gid: Gid) -> bool:
    """Whether the log says ``gid`` is to be committed (else it is rolled back)."""
    plan = history.plan(gid.epoch)
    return (
        plan is not None
        and plan.attempt == gid.attempt
        and history.state(gid.epoch) is EpochState.COMMIT_DECIDED
    )


def _why(history: EpochHistory, gid: Gid) -> str:
    plan, state = history.plan(gid.epoch), history.state(gid.epoch)
    if plan is None:
        return "the log holds no plan of the epoch (committed and compacted, or never planned)"
    if plan.attempt != gid.attempt:
        return f"attempt {gid.attempt} is not the plan's (attempt {plan.attempt})"
    return f"epoch {gid.epoch} is {state.value}"


def _prepared_view(history: EpochHistory, gids: list[Gid]) -> list[dict[str, Any]]:
    return [
        {
            "gid": str(g),
            "epoch": g.epoch,
            "attempt": g.attempt,
            "partition": g.partition,
            "action": "commit" if commits(history, g) else "rollback",
            "why": _why(history, g),
        }
        for g in gids
    ]


@dataclass(frozen=True)
class PostgresAdmin:
    """The PostgreSQL connector's admin interface: sinks' state in one database.

    Markers and prepared transactions are read per sink id (a composite's members have
    their own); ``control_schema`` holds the markers and the epoch log table.
    """

    dsn: str
    control_schema: str = DEFAULT_CONTROL_SCHEMA
    kind = "postgres"
    # Prepared work is finished as the log decided: the log is taken over first.
    decides_by_log = True

    def config(self, sink_id: str) -> PostgresSinkConfig:
        """Return a sink config for the log and the control tables (its table is not used)."""
        from connectors.postgres import PostgresSinkConfig
        from connectors.postgres._control import LOG_TABLE

        describe_dsn(self.dsn)  # a UsageError that never shows the value
        return PostgresSinkConfig.build(
            dsn=self.dsn, table=LOG_TABLE, sink_id=sink_id, control_schema=self.control_schema
        )

    def state(self, sink_id: str, history: EpochHistory) -> tuple[dict[str, Any], list[str]]:
        """``status`` of the sink: its markers and prepared transactions, with the problems."""
        prepared = _prepared_view(history, self.prepared(sink_id))
        state = {
            "markers": {str(p): asdict(m) for p, m in self.markers(sink_id).items()},
            "prepared": prepared,
        }
        problems = [
            f"prepared transaction {p['gid']} lingers ({p['why']}: the log says "
            f"{p['action']}); the sink's next start finishes it, or eos abort-lingering"
            for p in prepared
        ]
        return state, problems

    def abort_lingering(
        self, sink_id: str, history: EpochHistory, width: int, dry_run: bool
    ) -> dict[str, Any]:
        """Finish every prepared transaction of ``sink_id`` as the log says (:func:`commits`)."""
        del width  # prepared transactions are found by their gid, not by partition
        gids = self.prepared(sink_id)
        if not dry_run:
            self.finish(sink_id, [(g, commits(history, g)) for g in gids])
        view = _prepared_view(history, gids)
        return {
            "prepared": view,
            "committed": [] if dry_run else [p["gid"] for p in view if p["action"] == "commit"],
            "rolled_back": [] if dry_run else [p["gid"] for p in view if p["action"] == "rollback"],
        }

    def markers(self, sink_id: str) -> dict[int, Marker]:
        """Return the committed markers of ``sink_id`` (the idempotency table), by partition."""
        from connectors.postgres import read_markers

        with self._connect(sink_id) as conn:
            if not _has_markers(conn, self.control_schema):
                return {}
            return read_markers(conn, self.control_schema, sink_id)

    def prepared(self, sink_id: str) -> list[Gid]:
        """Return the prepared transactions of ``sink_id`` here (``pg_prepared_xacts``)."""
        from connectors.postgres._twophase import list_prepared

        with self._connect(sink_id) as conn:
            return list_prepared(conn, sink_id)

    def finish(self, sink_id: str, gids: list[tuple[Gid, bool]]) -> None:
        """COMMIT PREPARED (True) or ROLLBACK PREPARED (False) each gid; a gone one is fine."""
        from connectors.postgres._twophase import commit_prepared, rollback_prepared

        with self._connect(sink_id) as conn:
            for gid, commit in gids:
                (commit_prepared if commit else rollback_prepared)(conn, gid)

    def recorded_offsets(self, sink_id: str) -> tuple[int, dict[tuple[str, int], int]] | None:
        """Return the input offsets committed with the sink's rows (or None)."""
        from connectors.postgres._input_offsets import read_input_offsets

        with self._connect(sink_id) as conn:
            return read_input_offsets(conn, self.control_schema, sink_id)

    def _connect(self, sink_id: str) -> Any:
        from connectors.postgres._connect import connect

        return connect(self.config(sink_id), "eos", autocommit=True)


@dataclass(frozen=True)
class PostgresLog:
    """A sink's epoch log table (``sink_id`` names it; a composite's is under its own id)."""

    admin: PostgresAdmin
    sink_id: str

    @property
    def where(self) -> str:
        """The epoch log's place, for messages and output (no password)."""
        return (
            f"PostgreSQL table {self.admin.control_schema}.epoch_log at "
            f"{describe_dsn(self.admin.dsn)}"
        )

    def read_log(self) -> EpochHistory:
        """Read the history without taking the log over (a running sink keeps it).

        Raises:
            UnknownSinkError: the table holds no record of the sink.

        """
        from connectors.postgres import PostgresEpochLog

        log = PostgresEpochLog(self.admin.config(self.sink_id), read_only=True)
        try:
            history = log.load()
        finally:
            log.close()
        if not history.records and history.committed_through is None:
            msg = (
                f"sink {self.sink_id!r} is unknown here: the {self.where} holds no record of "
                "it. Check the sink id and --control-schema (the sink's control_schema "
                "option); a sink with a file log needs --epoch-log PATH, one whose log is "
                "a Kafka topic (a Kafka sink's, or a composite's whose first member is one) "
                "--epoch-log-topic TOPIC (--dsn still names the table's database)"
            )
            raise UnknownSinkError(msg)
        return history

    def open_log(self) -> EpochLog:
        """Open the log for appending: takes it over (refused while a coordinator holds it)."""
        from connectors.postgres import PostgresEpochLog

        return PostgresEpochLog(self.admin.config(self.sink_id))


def _has_markers(conn: Any, schema: str) -> bool:
    from connectors.postgres._control import MARKER_TABLE

    row = conn.execute(
        "SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = %s AND tablename = %s",
        (schema, MARKER_TABLE),
    ).fetchone()
    return row is not None and row[0] == 1


@dataclass(frozen=True, kw_only=True)
class TableCheck:
    """What ``eos verify --table`` checks: the input topic against the table a sink wrote.

    ``sink_id``: the PostgreSQL sink (a composite's member: its markers and prepared
    work); ``history``: its epoch log's (the composite's, cut to the member); ``identity``:
    the input records' id and key, compared with the table's ``id_column`` and
    ``key_column``.
    """

    admin: PostgresAdmin
    history: HistoryLike
    inputs: Sequence[Record]
    table: str
    schema: str
    write_mode: str
    identity: IdentityFn
    op: OpFn | None
    id_column: str
    key_column: str
    sink_id: str


def verify_table(spec: TableCheck) -> Result:
    """``eos verify --table``: ``connectors.verify.check_table``; anomalies exit 1."""
    report = check_table(
        spec.admin.dsn,
        table=spec.table,
        sink_id=spec.sink_id,
        inputs=spec.inputs,
        schema=spec.schema,
        control_schema=spec.admin.control_schema,
        write_mode=spec.write_mode,
        key_fn=spec.identity,
        op_fn=spec.op,
        id_column=spec.id_column,
        key_column=spec.key_column,
        epoch_log=spec.history,
    )
    data = {
        "table": report.table,
        "input_records": report.input_records,
        "table_rows": report.table_rows,
        "expected_rows": report.expected_rows,
        "examples": [f"{a.kind.value}: {a.detail}" for a in report.examples],
        "prepared": list(report.prepared),
        "notes": list(report.notes),
    }
    return checked(report.ok, report.anomaly_counts, data)


def error_code(exc: Exception) -> tuple[int, str] | None:
    """Return the exit code of a PostgreSQL error and its cause (None: not one).

    2 for an option the sink config refuses (a control schema too long) or a table or
    column the options name that the database does not have; 3 for a database that cannot
    be reached or read, or a missing ``postgres`` extra.
    """
    from connectors._extras import MissingExtraError

    if isinstance(exc, MissingExtraError):
        return UNAVAILABLE, "the postgres extra is not installed"
    try:
        import psycopg

        from connectors.postgres import PostgresCode, PostgresSinkError
    except ImportError:
        return None
    if isinstance(exc, PostgresSinkError) and exc.code is TxnCode.CONFIG:
        return USAGE, "bad arguments: an option the PostgreSQL sink refuses"
    if isinstance(exc, (psycopg.errors.UndefinedColumn, psycopg.errors.UndefinedTable)):
        return USAGE, (
            "bad arguments: the database has no such table or column (--table, --schema, "
            "--id-column, --key-column, --expected-query)"
        )
    if isinstance(exc, psycopg.errors.SyntaxError):
        return USAGE, "bad arguments: PostgreSQL refused the query's syntax (--expected-query)"
    if isinstance(exc, psycopg.Error) or has_code(exc, PostgresCode.WRITE, PostgresCode.FATAL):
        return UNAVAILABLE, "the PostgreSQL database could not be reached or read"
    return None
