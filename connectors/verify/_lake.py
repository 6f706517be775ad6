"""``check_lake_table``: the exactly-once check of a Delta Lake or Iceberg table sink.

Steps:

1. the input: the records given, or the input topic read with ``read_committed``;
2. the table's rows (id and key columns, as text), read as any reader sees them (Delta:
   delta-rs to Arrow; Iceberg: a pyiceberg scan of the current snapshot);
3. what the sink left in its staging area: vote records (prepared work the table's log does
   not name; after a stop with no epoch in doubt there is none);
4. the sink's epoch log against the table's own record of its epochs (the app transaction,
   the snapshot summary): every write partition's marker is the newest epoch the table
   holds, compared by :func:`connectors.verify.check_epoch_log`;
5. :func:`connectors.verify._table.analyze_table` lists the anomalies (append: every input
   record once).

Nothing is written; run it when the query is stopped (it reads a file epoch log without
taking it over).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from connectors.kafka._client import ClientConfig
from connectors.lakehouse._table import TableFormat, TableResource
from connectors.verify._analysis import Anomaly, AnomalyKind
from connectors.verify._epochs import HistoryLike, check_epoch_log, open_history
from connectors.verify._records import IdentityFn, Record, json_identity, read_topic
from connectors.verify._table import TableReport, TableRow, analyze_table
from txn import EpochPlan

Progress = Callable[[str], None]


def check_lake_table(
    table: TableFormat,
    *,
    sink_id: str,
    epoch_log: str | HistoryLike,
    inputs: Sequence[Record] | None = None,
    bootstrap: str | None = None,
    input_topic: str | None = None,
    key_fn: IdentityFn = json_identity,
    id_column: str = "id",
    allow_in_doubt: bool = False,
    progress: Progress | None = None,
    client_config: ClientConfig = None,
) -> TableReport:
    """Check the exactly-once invariants of a table a ``DeltaSink`` / ``IcebergSink`` wrote.

    Args:
        table: the table (``connectors.lakehouse.delta_table`` / ``iceberg_table``).
        sink_id: the sink's id (the epochs the table records are this id's).
        epoch_log: the sink's epoch log file, or an already loaded history.
        inputs: the input records; default: ``input_topic`` read from ``bootstrap``.
        bootstrap: Kafka bootstrap address (with ``input_topic``).
        input_topic: topic the query read; every record must carry a unique id.
        key_fn: maps an input record to its id and key (default: JSON ``id``/``key``).
        id_column: the table column holding the record id.
        allow_in_doubt: do not report epochs planned but never completed.
        progress: optional callback told about each step (for progress displays).
        client_config: the librdkafka settings of the input's consumer.

    Returns:
        The report (append mode); ``report.ok`` is true iff no anomaly was found.

    Raises:
        ValueError: neither ``inputs`` nor ``bootstrap`` and ``input_topic`` are given.

    """
    say = progress or (lambda _step: None)
    if inputs is None:
        if bootstrap is None or input_topic is None:
            msg = (
                "pass the input records (inputs=...) or where to read them (bootstrap, input_topic)"
            )
            raise ValueError(msg)
        say("reading input (read_committed)")
        inputs = read_topic(bootstrap, input_topic, client_config=client_config)
    say("reading the table")
    data = table.read([id_column])  # an append check compares ids only
    rows = [TableRow(str(i), "") for i in data[id_column].to_pylist()]
    say("staging area")
    staging = table.staging(sink_id)
    left = [r for e in staging.epochs() for r in staging.records(e)]
    extra = [
        Anomaly(
            kind=AnomalyKind.OPEN_TRANSACTION,
            detail=f"vote record of epoch {r.epoch} attempt {r.attempt} partition {r.partition} "
            f"({'prepared' if r.prepared else 'writing'}, {len(r.files)} files) is left in "
            "the staging area",
        )
        for r in left
    ]
    say("epoch log and the table's epochs")
    history = open_history(epoch_log, sink_id, _no_log)
    resource = TableResource(fmt=table, app=sink_id, digest="")
    last = resource.last_commit()
    width = history.max_parallelism()
    plan = EpochPlan(
        sink_id=sink_id, epoch=0, parallelism=width, fingerprint=""
    )  # only the width is read: every partition's marker
    markers = {} if last is None or not width else dict(resource.committed_markers(plan))
    extra += check_epoch_log(history, markers, allow_in_doubt=allow_in_doubt)
    committed = history.last_committed_epoch()
    notes = [
        f"epoch log: last committed epoch {committed}; the table holds epoch "
        f"{None if last is None else last.epoch} of {sink_id!r}"
    ]
    say("analyzing")
    return analyze_table(
        inputs,
        rows,
        write_mode="append",
        identity=key_fn,
        extra=extra,
        table=table.label,
        notes=notes,
        epoch_log_checked=True,
        last_committed_epoch=committed,
    )


def _no_log() -> HistoryLike:
    msg = "a table sink's epoch log is a file: pass its path (epoch_log=...)"
    raise ValueError(msg)
