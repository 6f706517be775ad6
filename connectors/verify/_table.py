"""The pure part of the table check: compare the input with a table's rows; list anomalies.

No I/O here, so unit tests can feed synthetic rows. What the table must hold, by write mode:

* ``append``: every input id exactly once (``lost``, ``duplicate``), and no id the input
  never had (``unknown``);
* ``upsert``: one row per key, and it is the key's *last* input record, the one with the
  highest input position (partition, offset): the sink orders each key's rows by input
  position, which is the key's change order when all of a key's records come from one input
  partition (Kafka's key partitioning gives that). A key missing is ``lost`` (the last
  record's id is named), a row holding an older record of its key is ``stale_row``, a row
  of a key the input never had is ``unknown``, two rows of one key ``duplicate``;
* ``changelog``: as upsert, except that a key whose last record's op is ``delete`` must be
  absent (a row of it is a ``stale_row``).

Besides the rows: every prepared transaction of the sink still in ``pg_prepared_xacts`` is
an ``open_transaction``; anomalies found elsewhere (the epoch log against the markers) come
in through ``extra``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from connectors.verify._analysis import Anomaly, AnomalyKind, _Collector, _Counted
from connectors.verify._records import IdentityFn, Record

# Write modes of the table check (those of ``connectors.postgres.WriteMode``).
APPEND = "append"
UPSERT = "upsert"
CHANGELOG = "changelog"
WRITE_MODES = (APPEND, UPSERT, CHANGELOG)
# The anomaly kinds a table check can report, in report order.
TABLE_KINDS = (
    AnomalyKind.LOST,
    AnomalyKind.DUPLICATE,
    AnomalyKind.UNKNOWN,
    AnomalyKind.STALE_ROW,
    AnomalyKind.OPEN_TRANSACTION,
    AnomalyKind.EPOCH_LOG_MISMATCH,
    AnomalyKind.IN_DOUBT_EPOCH,
)

OpFn = Callable[[Record], str]


@dataclass(frozen=True)
class TableRow:
    """What the check reads from one table row: the record id and the key it carries."""

    id: str
    key: str


@dataclass(frozen=True, kw_only=True)
class TableReport(_Counted):
    """Outcome of one table check; ``ok`` is true iff no anomaly was found."""

    table: str
    write_mode: str
    input_records: int
    table_rows: int
    expected_rows: int
    anomaly_counts: Mapping[AnomalyKind, int]
    examples: tuple[Anomaly, ...]
    prepared: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    epoch_log_checked: bool = False
    last_committed_epoch: int | None = None


def analyze_table(
    inputs: Sequence[Record],
    rows: Sequence[TableRow],
    *,
    write_mode: str,
    identity: IdentityFn,
    op: OpFn | None = None,
    prepared: Sequence[str] = (),
    extra: Sequence[Anomaly] = (),
    table: str = "",
    notes: Sequence[str] = (),
    epoch_log_checked: bool = False,
    last_committed_epoch: int | None = None,
) -> TableReport:
    """Check ``rows`` against ``inputs`` for ``write_mode`` (module docstring).

    ``op`` gives the changelog op of an input record (needed for ``changelog``);
    ``prepared`` the sink's gids left in ``pg_prepared_xacts``.

    Raises:
        ValueError: an unknown ``write_mode``, or ``changelog`` without ``op``.

    """
    if write_mode not in WRITE_MODES:
        msg = f"write_mode must be one of {', '.join(WRITE_MODES)}, got {write_mode!r}"
        raise ValueError(msg)
    if write_mode == CHANGELOG and op is None:
        msg = "write_mode 'changelog' needs op: the changelog op of each input record"
        raise ValueError(msg)
    found = _Collector()
    for anomaly in extra:
        found.add(anomaly)
    for gid in prepared:
        found.add(
            Anomaly(
                kind=AnomalyKind.OPEN_TRANSACTION,
                detail=f"prepared transaction {gid} of the sink is left in pg_prepared_xacts",
            )
        )
    if write_mode == APPEND:
        expected = _check_append(inputs, rows, identity, found)
    else:
        expected = _check_keyed(
            inputs, rows, identity, op if write_mode == CHANGELOG else None, found
        )
    return TableReport(
        table=table,
        write_mode=write_mode,
        input_records=len(inputs),
        table_rows=len(rows),
        expected_rows=expected,
        anomaly_counts={k: found.counts[k] for k in TABLE_KINDS},
        examples=tuple(found.examples),
        prepared=tuple(prepared),
        notes=tuple(notes),
        epoch_log_checked=epoch_log_checked,
        last_committed_epoch=last_committed_epoch,
    )


def _check_append(
    inputs: Sequence[Record], rows: Sequence[TableRow], identity: IdentityFn, found: _Collector
) -> int:
    expected = {identity(r).id for r in inputs}
    copies: dict[str, int] = defaultdict(int)
    for row in rows:
        copies[row.id] += 1
    for rid in sorted(expected - copies.keys(), key=_natural):
        found.add(
            Anomaly(
                kind=AnomalyKind.LOST, detail="input record missing from the table", record_id=rid
            )
        )
    for rid, n in sorted(copies.items(), key=lambda item: _natural(item[0])):
        if rid not in expected:
            found.add(
                Anomaly(
                    kind=AnomalyKind.UNKNOWN, detail="table row id not in the input", record_id=rid
                )
            )
        if n > 1:
            found.add(
                Anomaly(
                    kind=AnomalyKind.DUPLICATE, detail=f"{n} rows of this record", record_id=rid
                )
            )
    return len(expected)


def _check_keyed(
    inputs: Sequence[Record],
    rows: Sequence[TableRow],
    identity: IdentityFn,
    op: OpFn | None,
    found: _Collector,
) -> int:
    last: dict[str, tuple[int, int, str, bool]] = {}  # key -> (partition, offset, id, deleted)
    for rec in inputs:
        ident = identity(rec)
        position = (rec.partition, rec.offset)
        if ident.key not in last or position > last[ident.key][:2]:
            deleted = op is not None and op(rec) == "delete"
            last[ident.key] = (*position, ident.id, deleted)
    by_key: dict[str, list[TableRow]] = defaultdict(list)
    for row in rows:
        by_key[row.key].append(row)
    for key, (_, _, rid, deleted) in sorted(last.items()):
        if not deleted and key not in by_key:
            found.add(
                Anomaly(
                    kind=AnomalyKind.LOST,
                    detail=f"key {key!r} is missing from the table; its last input record is this one",
                    record_id=rid,
                )
            )
    for key, kept in sorted(by_key.items()):
        if len(kept) > 1:
            found.add(
                Anomaly(
                    kind=AnomalyKind.DUPLICATE,
                    detail=f"{len(kept)} rows of key {key!r}",
                    record_id=kept[-1].id,
                )
            )
        want = last.get(key)
        if want is None:
            found.add(
                Anomaly(
                    kind=AnomalyKind.UNKNOWN,
                    detail=f"key {key!r} is not in the input",
                    record_id=kept[0].id,
                )
            )
        elif want[3]:
            found.add(
                Anomaly(
                    kind=AnomalyKind.STALE_ROW,
                    detail=f"key {key!r} was deleted by record {want[2]} but the table still holds it",
                    record_id=kept[0].id,
                )
            )
        elif any(row.id != want[2] for row in kept):
            found.add(
                Anomaly(
                    kind=AnomalyKind.STALE_ROW,
                    detail=f"key {key!r} holds record {kept[0].id}, its last change is {want[2]}",
                    record_id=kept[0].id,
                )
            )
    return sum(1 for *_, deleted in last.values() if not deleted)


def _natural(rid: str) -> tuple[int, str]:
    """Sort numeric ids by value, others after them by text."""
    return (int(rid), "") if rid.isdigit() else (1 << 62, rid)
