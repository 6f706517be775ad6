"""The participant and the resource shared by the table sinks; a table format plugs in.

The third participant shape of the kit (docs/writing-a-db-connector.md): **files prepared by
the tasks, committed by the table's log with the epoch recorded**. The protocol is the
txn core's coordinator-completable one (docs/architecture.md, section 2):

* a write task (:class:`TablePartition`) writes its rows as data files no reader sees and a
  vote record naming them (``_staging``), and votes; it never commits;
* after logging the commit decision, the coordinator delivers it to every partition
  (:meth:`TableResource.commit_prepared`); the first delivery commits **one table
  transaction for the whole epoch** with every partition's files and the epoch (Delta: an
  app transaction ``(sink_id, epoch)``; Iceberg: the snapshot summary), the others find the
  epoch in the table and return: the table holds an epoch entirely or not at all;
* an epoch the table holds is never committed again (:func:`table_holds`); an epoch whose
  prepared files are gone is redone (:class:`txn.TxnCode.PREPARED_WORK_LOST`); files of aborted or
  superseded attempts are deleted, never named by the table's log.
"""

from __future__ import annotations

import abc
import dataclasses
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from connectors.lakehouse._schema import TableLayout
from connectors.lakehouse._staging import StagedFile, Staging, VoteRecord, choose
from connectors.stage import ArrowPartition
from connectors.stage._rows import HASH_COLUMN
from txn import EpochPlan, Marker, Participant, Resource, RowSummary, TxnCode, TxnError

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("connectors.lakehouse")

# Keys of the commit metadata (Delta commitInfo, Iceberg snapshot summary) naming the epoch.
APP_KEY = "eos.app"
EPOCH_KEY = "eos.epoch"
ATTEMPT_KEY = "eos.attempt"
PARTITIONS_KEY = "eos.partitions"  # JSON {partition: [rows, checksum]}
INPUT_KEY = "eos.input"  # the epoch's input end offsets, startingOffsets JSON (if Kafka)

Announce = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class EpochCommit:
    """What the table's log records for one epoch of one sink (its commit metadata).

    ``input_end``: the epoch's input end offsets when its query reads Kafka, committed with
    the data (docs/architecture.md, section 11; ``eos offsets`` compares them with the log).
    """

    app: str
    epoch: int
    attempt: int
    summaries: Mapping[int, tuple[int, str]]  # partition -> (rows, checksum)
    input_end: Mapping[tuple[str, int], int] | None = None

    def metadata(self) -> dict[str, str]:
        """Return the commit metadata (string values: both formats take them)."""
        import json

        from txn._offsets import offsets_json

        parts = {str(p): list(s) for p, s in sorted(self.summaries.items())}
        meta = {
            APP_KEY: self.app,
            EPOCH_KEY: str(self.epoch),
            ATTEMPT_KEY: str(self.attempt),
            PARTITIONS_KEY: json.dumps(parts, separators=(",", ":")),
        }
        if self.input_end is not None:
            meta[INPUT_KEY] = json.dumps(offsets_json(self.input_end), separators=(",", ":"))
        return meta

    @classmethod
    def parse(cls, meta: Mapping[str, object]) -> EpochCommit | None:
        """Return the commit of ``meta`` (a commit's metadata), or None if no sink wrote it."""
        import json

        if APP_KEY not in meta or EPOCH_KEY not in meta:
            return None
        from txn._offsets import parse_offsets_json

        parts = json.loads(str(meta.get(PARTITIONS_KEY, "{}")))
        ends = meta.get(INPUT_KEY)
        return cls(
            app=str(meta[APP_KEY]),
            epoch=int(str(meta[EPOCH_KEY])),
            attempt=int(str(meta.get(ATTEMPT_KEY, "0"))),
            summaries={int(p): (int(s[0]), str(s[1])) for p, s in parts.items()},
            input_end=None
            if ends is None
            else parse_offsets_json(json.loads(str(ends)), INPUT_KEY),
        )


class FileWriter(abc.ABC):
    """Writes one task's rows as data files; names each file (``announce``) before creating it."""

    @abc.abstractmethod
    def write(self, batch: pa.RecordBatch) -> None:
        """Write the rows of ``batch`` (the table's columns only)."""

    @abc.abstractmethod
    def close(self) -> tuple[StagedFile, ...]:
        """Finish every file; return their descriptions."""

    def abort(self) -> None:  # noqa: B027 - optional: nothing to release by default
        """Stop writing (the files are deleted through the vote record)."""


class TableFormat(abc.ABC):
    """One table format (Delta Lake, Iceberg): picklable, shipped to the write tasks."""

    @property
    @abc.abstractmethod
    def label(self) -> str:
        """Return the table's name in messages and reports (no credentials)."""

    @abc.abstractmethod
    def staging(self, app: str) -> Staging:
        """Return the staging area of writer ``app`` beside the table."""

    @abc.abstractmethod
    def last_commit(self, app: str) -> EpochCommit | None:
        """Return the newest epoch writer ``app`` committed to the table (reads the table's log)."""

    @abc.abstractmethod
    def writer(self, staging: Staging, record: VoteRecord, announce: Announce) -> FileWriter:
        """Return a writer of ``record``'s data files, each named through ``announce`` before it exists.

        File names carry the record's token (unique per task attempt); a writer may keep
        files of its own in ``staging``'s directory of the record's epoch (deleted with it).
        """

    @abc.abstractmethod
    def read(self, columns: Sequence[str]) -> pa.Table:
        """Return the ``columns`` of every row a reader of the table sees now."""

    @abc.abstractmethod
    def damaged(self, staging: Staging, records: Iterable[VoteRecord]) -> list[int]:
        """Partitions whose prepared files are missing or not the size recorded."""

    @abc.abstractmethod
    def commit(self, commit: EpochCommit, records: Sequence[VoteRecord]) -> None:
        """Commit one table transaction adding every record's files, with ``commit``'s metadata.

        Conflicts with other writers are retried inside (bounded); an epoch that committed
        meanwhile is never committed again.
        """


def table_holds(last: EpochCommit | None, epoch: int) -> bool:
    """Whether the table's log holds ``epoch`` of its writer (it commits epochs in order)."""
    return last is not None and last.epoch >= epoch


@dataclass(frozen=True, kw_only=True)
class TableResource(Resource[ArrowPartition]):
    """The driver's description of a table sink, pickled to every write task.

    Coordinator-completable: the tasks leave their files prepared, the coordinator commits
    them in one table transaction per epoch (module docstring). ``app``: the sink id the
    table records epochs under; ``digest``: the config's fingerprint.
    """

    fmt: TableFormat
    app: str
    digest: str
    _known: dict[str, EpochCommit] = field(default_factory=dict, compare=False, repr=False)

    completable_by_coordinator = True
    reads_markers = False

    def open(self, plan: EpochPlan, partition: int) -> TablePartition:
        """Open write partition ``partition`` of ``plan`` (inside the write task)."""
        return TablePartition(self, plan, partition)

    def fingerprint(self) -> str:
        """Return the config's fingerprint."""
        return self.digest

    def last_commit(self) -> EpochCommit | None:
        """Return the newest epoch the table holds (cached once seen: the table commits in order)."""
        last = self.fmt.last_commit(self.app)
        known = self._known.get("last")
        if last is None or (known is not None and known.epoch > last.epoch):
            return known
        self._known["last"] = last
        return last

    def commit_prepared(self, plan: EpochPlan, partition: int) -> None:
        """Deliver the commit decision: the first delivery of an epoch commits all of it.

        Raises:
            TxnCode.PREPARED_WORK_LOST: a partition's vote record or files are missing; the table
                commits an epoch whole, so nothing is committed and the epoch is redone.

        """
        staging = self.fmt.staging(self.app)
        known = self._known.get("last")
        if table_holds(known, plan.epoch) or table_holds(self.last_commit(), plan.epoch):
            return
        chosen = choose(staging.records(plan.epoch), plan.attempt, plan.parallelism)
        missing = sorted(set(range(plan.parallelism)) - set(chosen))
        missing += self.fmt.damaged(staging, chosen.values())
        if missing:
            msg = (
                f"epoch {plan.epoch} attempt {plan.attempt} of sink {self.app!r}: the prepared "
                f"files of partitions {sorted(set(missing))} are gone (deleted by hand or by a "
                "VACUUM / orphan-file removal with a short retention); the table commits an "
                "epoch whole, so none of it was committed and the replay writes it again"
            )
            raise TxnError(msg, partition=partition, code=TxnCode.PREPARED_WORK_LOST)
        summaries = {p: (r.rows, r.checksum) for p, r in chosen.items()}
        ends = None if plan.input is None else plan.input.end_map()
        commit = EpochCommit(
            app=self.app,
            epoch=plan.epoch,
            attempt=plan.attempt,
            summaries=summaries,
            input_end=ends,
        )
        tokens = frozenset(r.token for r in chosen.values())
        staging.put_intent(plan.epoch, plan.attempt, sorted(tokens))
        self.fmt.commit(commit, [chosen[p] for p in sorted(chosen)])
        self._known["last"] = commit
        staging.finish(plan.epoch, tokens)

    def rollback_prepared(self, plan: EpochPlan, partition: int) -> None:
        """Delete the partition's vote records and files of ``plan``'s attempt; idempotent.

        An epoch the table holds is left alone (its files are named by the table's log).
        """
        if table_holds(self.last_commit(), plan.epoch):
            return
        staging = self.fmt.staging(self.app)
        for record in staging.records(plan.epoch):
            if record.attempt == plan.attempt and record.partition == partition:
                staging.discard(record)

    def prepared_partitions(self, plan: EpochPlan) -> Sequence[int]:
        """Partitions of ``plan`` with a prepared vote record, unless the table holds the epoch."""
        if table_holds(self.last_commit(), plan.epoch):
            return ()
        staging = self.fmt.staging(self.app)
        return sorted(choose(staging.records(plan.epoch), plan.attempt, plan.parallelism))

    def abort_lingering(self, partitions: Iterable[int]) -> None:
        """Delete what dead attempts left on ``partitions`` (no task of the sink runs now)."""
        self.fmt.staging(self.app).clean(partitions, _epoch(self.last_commit()))

    def committed_markers(self, plan: EpochPlan) -> Mapping[int, Marker | None]:
        """Every partition's marker: the newest epoch the table holds, with its summary."""
        last = self.last_commit()
        if last is None:
            return dict.fromkeys(range(plan.parallelism))
        return {p: marker_of(last, p) for p in range(plan.parallelism)}


def _epoch(commit: EpochCommit | None) -> int | None:
    return None if commit is None else commit.epoch


def marker_of(commit: EpochCommit, partition: int) -> Marker:
    """Partition ``partition``'s marker in ``commit`` (its row count and checksum)."""
    rows, checksum = commit.summaries.get(partition, (0, ""))
    return Marker(commit.epoch, rows, checksum)


class TablePartition(Participant[ArrowPartition]):
    """Write partition ``partition`` of one epoch: data files and a vote record, never a commit.

    No fencing is needed: a task attempt writes files of its own (its token) and only the
    coordinator makes files visible, choosing one prepared record per partition; a zombie's
    files are never committed and are deleted with its record.
    """

    def __init__(self, resource: TableResource, plan: EpochPlan, partition: int) -> None:
        self._resource, self._plan, self._partition = resource, plan, partition
        self._staging = resource.fmt.staging(resource.app)
        token = uuid.uuid4().hex[:16]
        self._record = VoteRecord(
            epoch=plan.epoch, attempt=plan.attempt, partition=partition, token=token
        )
        self._writer: FileWriter | None = None
        self._begun = False

    def committed_marker(self) -> Marker | None:
        """Return the newest epoch the table holds, with this partition's summary in that commit."""
        last = self._resource.fmt.last_commit(self._resource.app)
        return None if last is None else marker_of(last, self._partition)

    def summarize(self, rows: ArrowPartition) -> RowSummary:
        """Count and checksum the rows without writing (a replay compared with the marker)."""
        return rows.summary()

    def begin(self, epoch: int) -> None:
        """Write the vote record ahead (state ``writing``, no files yet)."""
        self._staging.put(self._record)
        self._begun = True

    def _announce(self, path: str) -> None:
        files = (*self._record.files, StagedFile(path=path))
        self._record = dataclasses.replace(self._record, files=files)
        self._staging.put(self._record)

    def write(self, rows: ArrowPartition) -> RowSummary:
        """Write the rows as data files (each named in the vote record before it exists)."""
        self._writer = self._resource.fmt.writer(self._staging, self._record, self._announce)
        for batch in rows.batches():
            self._writer.write(batch.drop_columns([HASH_COLUMN]))
        files = self._writer.close()
        self._record = dataclasses.replace(self._record, files=files)
        return rows.summary()

    def pre_commit(self, summary: RowSummary) -> None:
        """Rewrite the vote record as prepared: the files, the row count, the checksum."""
        self._record = dataclasses.replace(
            self._record, prepared=True, rows=summary.rows, checksum=summary.checksum
        )
        self._staging.put(self._record)

    def commit(self) -> None:
        """Never called: the coordinator commits the epoch (the resource is completable)."""
        msg = f"partition {self._partition}: a table sink's epoch is committed by the coordinator"
        raise TxnError(msg, code=TxnCode.PARTICIPANT)

    def abort(self) -> None:
        """Delete this attempt's files and vote record. Idempotent; never raises."""
        if self._writer is not None:
            self._writer.abort()
        if not self._begun:
            return
        self._begun = False
        try:
            self._staging.discard(self._record)
        except Exception as exc:  # noqa: BLE001 - the record names the files; recovery deletes them
            log.warning("sink %s: abort left files behind (%s)", self._resource.app, exc)


class TableDriver(abc.ABC):
    """The driver's view of one table: its definition, creating and evolving it."""

    name: str  # in messages

    @abc.abstractmethod
    def describe(self) -> tuple[pa.Schema, tuple[str, ...]] | None:
        """Return the table's Arrow schema and partition columns (None: no table yet)."""

    @abc.abstractmethod
    def create(self, schema: pa.Schema, partition_by: Sequence[str]) -> None:
        """Create the table (idempotent: a replayed epoch asks again)."""

    @abc.abstractmethod
    def add_columns(self, schema: pa.Schema, names: Sequence[str]) -> None:
        """Add the columns ``names`` of ``schema`` (idempotent)."""

    @abc.abstractmethod
    def table_format(
        self, layout: TableLayout | None, partition_by: tuple[str, ...]
    ) -> TableFormat:
        """Return the picklable format the write tasks get."""

    @abc.abstractmethod
    def default_epoch_log(self) -> str:
        """Return the epoch log's path when the config names none."""
