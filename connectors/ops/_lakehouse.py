"""``eos`` on the table sinks (Delta Lake, Iceberg): their epoch log file, the table, the staging area.

:class:`LakeAdmin` is the table sinks' admin interface (``_target.SinkAdmin``) over one
table; :class:`LakeLog` a table sink's epoch log file. A table sink's state is in the table
itself (the newest epoch it holds, with each partition's row count and checksum and the
epoch's input offsets, in the commit's metadata) and in its staging area (vote records of
prepared work the table's log does not name yet).

What ``abort-lingering`` does is what the sink's own recovery does (docs/delta-sink.md,
"How an epoch commits"): an epoch the log decided to commit is committed from its vote
records (one table transaction; the table then holds it), every other vote record is
deleted with its files. It takes the log over first (``decides_by_log``).

Imports the table libraries (the ``delta`` / ``iceberg`` extras) only when used.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from connectors.lakehouse import delta_table, iceberg_table
from connectors.lakehouse._staging import VoteRecord
from connectors.lakehouse._table import TableFormat, TableResource
from connectors.ops._errors import UnknownSinkError, UsageError
from connectors.ops._result import Result, checked
from connectors.verify import HistoryLike, IdentityFn, Record, check_lake_table
from txn import EpochHistory, EpochLog, EpochPlan, EpochState, FileEpochLog

DELTA, ICEBERG = "delta", "iceberg"
KINDS = (DELTA, ICEBERG)


def lake_table(kind: str, location: str | None, catalog: str, properties: list[str]) -> TableFormat:
    """Return the table of ``--delta URI`` / ``--iceberg TABLE`` (``--catalog[-property]``)."""
    if not location:
        msg = f"a {kind} sink needs --{kind} ({'its table URI' if kind == DELTA else 'its table'})"
        raise UsageError(msg)
    if kind == DELTA:
        return delta_table(location)
    pairs = [p.partition("=") for p in properties]
    if any(not key or not sep for key, sep, _ in pairs):
        msg = f"--catalog-property takes KEY=VALUE, got {properties!r}"
        raise UsageError(msg)
    return iceberg_table(location, catalog, {key: value for key, _, value in pairs})


def default_log(kind: str, table: TableFormat, sink_id: str) -> str:
    """Return the epoch log a table sink keeps by default: ``<table>/_eos/<sink_id>.epochlog``.

    Only a Delta table on the local file system has one without asking its catalog; any
    other needs ``--epoch-log``.
    """
    from connectors.lakehouse._config import is_local, local_path

    if kind == DELTA and is_local(table.label):
        return os.path.join(local_path(table.label), "_eos", f"{sink_id}.epochlog")
    msg = f"a {kind} sink's epoch log is a file: pass --epoch-log PATH (the sink's epoch_log)"
    raise UsageError(msg)


def _action(history: EpochHistory, record: VoteRecord, held: bool) -> str:
    """Return what recovery does with ``record``: commit it (a decided attempt) or delete it."""
    plan = history.plan(record.epoch)
    decided = history.state(record.epoch) is EpochState.COMMIT_DECIDED
    commits = plan is not None and plan.attempt == record.attempt and decided and record.prepared
    return "commit" if commits and not held else "delete"


@dataclass(frozen=True)
class LakeAdmin:
    """The table sinks' admin interface: one table (``kind`` delta or iceberg)."""

    table: TableFormat
    kind: str
    # Prepared work is committed as the log decided: the log is taken over first.
    decides_by_log = True

    def _resource(self, sink_id: str) -> TableResource:
        return TableResource(fmt=self.table, app=sink_id, digest="")

    def _records(self, sink_id: str) -> list[VoteRecord]:
        staging = self.table.staging(sink_id)
        return [r for e in staging.epochs() for r in staging.records(e)]

    def _view(self, sink_id: str, history: EpochHistory) -> list[dict[str, Any]]:
        last = self._resource(sink_id).last_commit()
        return [
            {
                "epoch": r.epoch,
                "attempt": r.attempt,
                "partition": r.partition,
                "prepared": r.prepared,
                "files": len(r.files),
                "action": _action(history, r, last is not None and last.epoch >= r.epoch),
            }
            for r in self._records(sink_id)
        ]

    def state(self, sink_id: str, history: EpochHistory) -> tuple[dict[str, Any], list[str]]:
        """``status``: the epoch the table holds, each partition's marker, the vote records left."""
        resource = self._resource(sink_id)
        last = resource.last_commit()
        width = history.max_parallelism()
        markers: dict[str, Any] = {}
        if last is not None and width:
            plan = EpochPlan(sink_id=sink_id, epoch=last.epoch, parallelism=width, fingerprint="")
            markers = {str(p): asdict(m) for p, m in resource.committed_markers(plan).items() if m}
        view = self._view(sink_id, history)
        state = {
            "table": self.table.label,
            "table_epoch": None if last is None else last.epoch,
            "markers": markers,
            "prepared": view,
        }
        problems = [
            f"vote record of epoch {v['epoch']} attempt {v['attempt']} partition "
            f"{v['partition']} lingers (the log says {v['action']}); the sink's next start "
            "finishes it, or eos abort-lingering"
            for v in view
        ]
        committed = history.last_committed_epoch()
        if committed is not None and (last is None or last.epoch < committed):
            problems.append(
                f"the epoch log says epoch {committed} committed, the table holds "
                f"{'no epoch' if last is None else f'epoch {last.epoch}'} of {sink_id!r}: "
                "a table restored to an older version, or another table"
            )
        return state, problems

    def abort_lingering(
        self, sink_id: str, history: EpochHistory, width: int, dry_run: bool
    ) -> dict[str, Any]:
        """Commit what the log decided, delete every other vote record with its files."""
        view = self._view(sink_id, history)
        decided = sorted({v["epoch"] for v in view if v["action"] == "commit"})
        if not dry_run:
            resource = self._resource(sink_id)
            for epoch in decided:
                plan = history.plan(epoch)
                assert plan is not None  # noqa: S101 - "commit" needs the plan (_action)
                resource.commit_prepared(plan, 0)  # the first delivery commits the epoch
            top = max([width, *(v["partition"] + 1 for v in view)])
            resource.abort_lingering(range(top))
        return {
            "prepared": view,
            "committed_epochs": [] if dry_run else decided,
            "deleted": [] if dry_run else [v for v in view if v["action"] == "delete"],
        }

    def recorded_offsets(self, sink_id: str) -> tuple[int, dict[tuple[str, int], int]] | None:
        """Return the input offsets committed with the table's newest epoch of the sink."""
        last = self._resource(sink_id).last_commit()
        if last is None or last.input_end is None:
            return None
        return last.epoch, dict(last.input_end)


@dataclass(frozen=True)
class LakeLog:
    """A table sink's epoch log file."""

    sink_id: str
    path: str

    @property
    def where(self) -> str:
        """The epoch log's place, for messages and output."""
        return f"epoch log file {self.path}"

    def read_log(self) -> EpochHistory:
        """Read the history without taking the log over (a running sink keeps it).

        Raises:
            UnknownSinkError: no log file, or no record of the sink in it.

        """
        if not Path(self.path).exists():
            msg = (
                f"sink {self.sink_id!r} is unknown here: there is no epoch log file at {self.path}"
            )
            raise UnknownSinkError(msg)
        history = FileEpochLog(self.path, sink_id=self.sink_id, read_only=True).load()
        if not history.records and history.committed_through is None:
            msg = f"sink {self.sink_id!r} is unknown here: {self.path} holds no record of it"
            raise UnknownSinkError(msg)
        return history

    def open_log(self) -> EpochLog:
        """Open the log for appending: takes it over (refused while a coordinator holds it)."""
        return FileEpochLog(self.path, sink_id=self.sink_id)


@dataclass(frozen=True, kw_only=True)
class LakeCheck:
    """What ``eos verify --delta/--iceberg`` checks: the input records against the table."""

    table: TableFormat
    history: HistoryLike
    inputs: Sequence[Record]
    identity: IdentityFn
    id_column: str
    sink_id: str


def verify_lake(spec: LakeCheck) -> Result:
    """``eos verify --delta/--iceberg``: ``connectors.verify.check_lake_table``; anomalies exit 1."""
    report = check_lake_table(
        spec.table,
        sink_id=spec.sink_id,
        epoch_log=spec.history,
        inputs=spec.inputs,
        key_fn=spec.identity,
        id_column=spec.id_column,
    )
    data = {
        "table": report.table,
        "input_records": report.input_records,
        "table_rows": report.table_rows,
        "examples": [f"{a.kind.value}: {a.detail}" for a in report.examples],
        "notes": list(report.notes),
    }
    return checked(report.ok, report.anomaly_counts, data)
