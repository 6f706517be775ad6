"""Crash-matrix worlds of the table sinks: a real table on the local file system, no Spark.

Durable: the table (its log, its data files, the staging area) and the epoch log file. In
process (dropped at every simulated driver crash): the epoch log handle, the resource, the
coordinator. The driver and the crash points are ``txn.testing``'s.
"""

from __future__ import annotations

import abc
import os
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from connectors.lakehouse._staging import STAGING_DIR
from connectors.lakehouse._table import TableFormat, TableResource
from connectors.stage import ArrowPartition
from connectors.stage._rows import HASH_COLUMN
from txn import EpochLog, EpochPlan, FileEpochLog
from txn.testing import CrashWorld
from txn.testing._crash import FULL, epoch_size

ROWS_PER_EPOCH = 12
SCHEMA = pa.schema([("id", pa.int64()), ("epoch", pa.int64()), ("payload", pa.string())])


def epoch_ids(epoch: int, shape: str = FULL, *, keyed: bool = False) -> list[int]:
    """The ids of ``epoch``'s rows; keyed (an upsert): the same keys every epoch."""
    base = 0 if keyed else epoch * 1000
    return [base + i for i in range(epoch_size(epoch, shape, ROWS_PER_EPOCH))]


def partition_rows(
    epoch: int, parallelism: int, partition: int, shape: str, *, keyed: bool = False
) -> pa.RecordBatch:
    """Route by content (keyed: by key) as the Spark stage does: a replay meets the same partition."""
    ids = [
        i
        for i in epoch_ids(epoch, shape, keyed=keyed)
        if zlib.crc32(b"%d" % i) % parallelism == partition
    ]
    return pa.record_batch(
        {
            "id": pa.array(ids, pa.int64()),
            "epoch": pa.array([epoch] * len(ids), pa.int64()),
            "payload": pa.array([f"row {i}" for i in ids]),
            HASH_COLUMN: pa.array([zlib.crc32(b"%d:%d" % (i, epoch)) for i in ids], pa.int64()),
        }
    )


@dataclass
class TableWorld(CrashWorld[ArrowPartition], abc.ABC):
    """A table sink's durable state under ``tmp_path``; subclasses say which format."""

    tmp_path: Path = field(kw_only=True)
    shape: str = field(default=FULL, kw_only=True)
    keyed: bool = field(default=False, kw_only=True)  # an upsert on ``id``

    @abc.abstractmethod
    def table_format(self) -> TableFormat:
        """The format of the world's table (it exists)."""

    @abc.abstractmethod
    def table_ids(self) -> list[tuple[int, int]]:
        """``(id, epoch)`` of every row a reader of the table sees."""

    @abc.abstractmethod
    def data_files(self) -> tuple[set[str], set[str]]:
        """Data files on storage, and data files the table's log names (as paths)."""

    @abc.abstractmethod
    def commits_of_sink(self) -> list[int]:
        """The epochs of the table's commits made by the sink, oldest first."""

    @abc.abstractmethod
    def staging_root(self) -> Path:
        """The directory holding ``_eos`` of the table."""

    def open_log(self) -> EpochLog:
        return FileEpochLog(str(self.tmp_path / "sink.epochlog"), sink_id=self.sink_id)

    def new_resource(self) -> TableResource:
        return TableResource(fmt=self.table_format(), app=self.sink_id, digest="fp-1")

    def rows_for(self, plan: EpochPlan, partition: int) -> ArrowPartition:
        rows = partition_rows(plan.epoch, plan.parallelism, partition, self.shape, keyed=self.keyed)
        return ArrowPartition([rows])

    def check_atomic(self) -> str:
        """After a recovery every epoch is in the table entirely or not at all."""
        if self.keyed:  # every key holds the same (the last committed) epoch
            epochs = {e for _, e in self.table_ids()}
            return f"keys of several epochs after recovery: {epochs}" if len(epochs) > 1 else ""
        per_epoch = Counter(e for _, e in self.table_ids())
        partial = {e: n for e, n in per_epoch.items() if n != len(epoch_ids(e, self.shape))}
        return f"partly committed epochs after recovery: {partial}" if partial else ""

    def staged_records(self) -> list[str]:
        base = self.staging_root() / STAGING_DIR / self.sink_id
        return [str(p) for p in base.rglob("*.json")] if base.exists() else []

    def check_exactly_once(self, epochs: int) -> None:
        ids = self.table_ids()
        counts = Counter(i for i, _ in ids)
        assert not [i for i, c in counts.items() if c > 1], "duplicated rows"
        if self.keyed:
            last = max((e for e in range(epochs) if epoch_ids(e, self.shape)), default=None)
            want = [(i, last) for i in epoch_ids(0, self.shape, keyed=True)]
            assert sorted(ids) == want, (sorted(ids), want)
        else:
            want = [i for e in range(epochs) for i in epoch_ids(e, self.shape)]
            assert sorted(counts) == want
        assert self.commits_of_sink() == list(range(epochs)), "an epoch committed twice or not"
        on_disk, named = self.data_files()
        assert on_disk == named, f"files no commit names: {sorted(on_disk - named)}"
        assert self.staged_records() == [], "vote records left behind"
        last = self.new_resource().last_commit()
        assert last is not None and last.epoch == epochs - 1, last
        self.check_log(epochs)


def relative_files(root: Path, *, skip: tuple[str, ...]) -> set[str]:
    """Every ``.parquet`` file under ``root`` outside the directories ``skip``, relative."""
    out = set()
    for path in root.rglob("*.parquet"):
        rel = path.relative_to(root)
        if rel.parts[0] not in skip:
            out.add(str(rel).replace(os.sep, "/"))
    return out
