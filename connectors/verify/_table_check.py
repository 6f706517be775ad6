"""``check_table``: read what the table check needs from Kafka and PostgreSQL, then analyze it.

Steps:

1. the input: the records given, or the input topic read with ``read_committed``;
2. the table's rows (id and key columns, as text);
3. the sink's prepared transactions left in ``pg_prepared_xacts`` (gids of its scheme, this
   database);
4. the sink's epoch log (a ``FileEpochLog`` path, a loaded history, or the
   ``PostgresEpochLog`` table in the control schema) and its markers (the idempotency
   table), compared by :func:`connectors.verify.check_epoch_log`;
5. :func:`connectors.verify._table.analyze_table` lists the anomalies.

Run it when the query is stopped: nothing is written to the table or the markers, but
opening the ``PostgresEpochLog`` takes the log over the way a restarted coordinator would
(it bumps the log's owner generation).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from connectors.kafka._client import ClientConfig
from connectors.verify._analysis import Anomaly
from connectors.verify._epochs import (
    HistoryLike,
    MarkerLike,
    check_epoch_log,
    open_history,
)
from connectors.verify._records import IdentityFn, Record, json_identity, read_topic
from connectors.verify._table import APPEND, OpFn, TableReport, TableRow, analyze_table

Progress = Callable[[str], None]


def check_table(
    dsn: str,
    *,
    table: str,
    sink_id: str,
    inputs: Sequence[Record] | None = None,
    bootstrap: str | None = None,
    input_topic: str | None = None,
    schema: str = "public",
    control_schema: str = "eos",
    write_mode: str = "append",
    key_fn: IdentityFn = json_identity,
    op_fn: OpFn | None = None,
    id_column: str = "id",
    key_column: str = "key",
    epoch_log: str | HistoryLike | None = None,
    allow_in_doubt: bool = False,
    verify_epoch_log: bool = True,
    progress: Progress | None = None,
    client_config: ClientConfig = None,
) -> TableReport:
    """Check the exactly-once invariants of ``schema.table`` against the sink's input.

    Args:
        dsn: libpq connection string of the database holding the table.
        table: the table the sink wrote.
        sink_id: the PostgreSQL sink's id (names its gids, markers and epoch log).
        inputs: the input records; default: ``input_topic`` read from ``bootstrap``.
        bootstrap: Kafka bootstrap address (with ``input_topic``).
        input_topic: topic the query read; every record must carry a unique id.
        schema: the table's schema.
        control_schema: the sink's control schema (markers, epoch log table).
        write_mode: ``append``, ``upsert`` or ``changelog`` (what the table must hold).
        key_fn: maps an input record to its id and key (default: JSON ``id``/``key``).
        op_fn: the changelog op of an input record (``changelog`` only).
        id_column: the table column holding the record id.
        key_column: the table column holding the record key (upsert and changelog; an
            append check reads ids only).
        epoch_log: a ``FileEpochLog`` path, an already loaded history, or ``None`` for the
            sink's epoch log table.
        allow_in_doubt: do not report epochs planned but never completed.
        verify_epoch_log: ``False`` skips step 4 (a sink without exactly-once has no
            markers); the report then says ``epoch_log_checked=False``.
        progress: optional callback told about each step (for progress displays).
        client_config: the librdkafka settings of the input's consumer (security,
            ``client.id``), as the Kafka sink's option of that name.

    Returns:
        The report; ``report.ok`` is true iff no anomaly was found.

    Raises:
        ValueError: neither ``inputs`` nor ``bootstrap`` and ``input_topic`` are given.

    """
    import psycopg
    from psycopg import sql

    from connectors.postgres import read_markers
    from connectors.postgres._twophase import list_prepared

    say = progress or (lambda _step: None)
    if inputs is None:
        if bootstrap is None or input_topic is None:
            msg = (
                "pass the input records (inputs=...) or where to read them (bootstrap, input_topic)"
            )
            raise ValueError(msg)
        say("reading input (read_committed)")
        inputs = read_topic(bootstrap, input_topic, client_config=client_config)
    with psycopg.connect(dsn, autocommit=True) as conn:
        say("reading the table")
        # An append check compares ids only: the key column is not read (it may not exist).
        key = sql.SQL("''") if write_mode == APPEND else sql.Identifier(key_column)
        query = sql.SQL("SELECT {}::text, {}::text FROM {}.{}").format(
            sql.Identifier(id_column), key, sql.Identifier(schema), sql.Identifier(table)
        )
        rows = [TableRow(str(i), str(k)) for i, k in conn.execute(query).fetchall()]
        say("prepared transactions")
        prepared = [str(gid) for gid in list_prepared(conn, sink_id)]
        markers: Mapping[int, MarkerLike | None] = {}
        if verify_epoch_log:
            say("epoch log and markers")
            markers = read_markers(conn, control_schema, sink_id)
    extra: list[Anomaly] = []
    notes = ["epoch log not checked (disabled by the caller)"]
    checked, last = False, None
    if verify_epoch_log:
        history = _history(epoch_log, dsn, table, schema, sink_id, control_schema)
        extra = check_epoch_log(history, markers, allow_in_doubt=allow_in_doubt)
        last = history.last_committed_epoch()
        notes = [
            f"epoch log: last committed epoch {last}, markers of {len(markers)} write partitions"
        ]
        checked = True
    say("analyzing")
    return analyze_table(
        inputs,
        rows,
        write_mode=write_mode,
        identity=key_fn,
        op=op_fn,
        prepared=prepared,
        extra=extra,
        table=f"{schema}.{table}",
        notes=notes,
        epoch_log_checked=checked,
        last_committed_epoch=last,
    )


def _history(
    epoch_log: str | HistoryLike | None,
    dsn: str,
    table: str,
    schema: str,
    sink_id: str,
    control_schema: str,
) -> HistoryLike:
    def table_log() -> Any:
        from connectors.postgres import PostgresEpochLog, PostgresSinkConfig

        return PostgresEpochLog(
            PostgresSinkConfig.build(
                dsn=dsn, table=table, sink_id=sink_id, schema=schema, control_schema=control_schema
            )
        )

    return open_history(epoch_log, sink_id, table_log)
