"""The staging area of a table sink: vote records and commit intents beside the table.

A write task's prepared work is data files no reader sees (the table's log does not name
them) plus one **vote record** naming them, under ``<table>/_eos/<app>/<epoch>/``
(directories starting with ``_`` are skipped by Delta's and Iceberg's readers and by
``VACUUM``). The record is written ahead: before a task creates a data file it rewrites its
record (state ``writing``) with the file's path, so whatever a killed task leaves behind is
named by a record and can be deleted; once every file is written the record is rewritten as
``prepared``, with the files' sizes and descriptions, the row count and the checksum. Each
task attempt has a random ``token`` of its own, so two live attempts of one partition never
write the same file.

The coordinator's commit reads the records of the epoch's plan attempt, takes one prepared
record per partition (:func:`choose`), writes a **commit intent** naming those tokens, commits
the table, then deletes every other record's files and every record, the intent last. After
a crash in between, :meth:`Staging.clean` finds the intent and keeps exactly the committed
files. Writes go to a temporary name first and are moved into place, so a record is read
whole or not at all.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from connectors.lakehouse._errors import READ_FAILED, WRITE_FAILED, LakehouseError

if TYPE_CHECKING:
    import pyarrow.fs as pafs

STAGING_DIR = "_eos"
_INTENT = "commit.json"
_TMP = ".tmp-"


@dataclass(frozen=True, kw_only=True)
class StagedFile:
    """One data file a write task wrote: where, how big, and what the table's log needs.

    ``path``: as the table's log names it (Delta: relative to the table root; Iceberg: the
    manifest's URI). ``detail``: the format's own description (Delta: partition values and
    statistics), JSON-ready.
    """

    path: str
    size: int = 0
    rows: int = 0
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class VoteRecord:
    """What one task attempt of one write partition wrote for one plan attempt of an epoch."""

    epoch: int
    attempt: int
    partition: int
    token: str
    prepared: bool = False
    rows: int = 0
    checksum: str = ""
    files: tuple[StagedFile, ...] = ()

    @property
    def name(self) -> str:
        """The record's file name inside its epoch directory."""
        return f"{self.attempt}-{self.partition}-{self.token}.json"

    def to_json(self) -> str:
        """Serialize (canonical JSON)."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> VoteRecord:
        """Parse what :meth:`to_json` wrote."""
        doc = json.loads(text)
        files = tuple(StagedFile(**f) for f in doc.pop("files"))
        return cls(**doc, files=files)


def choose(records: Iterable[VoteRecord], attempt: int, parallelism: int) -> dict[int, VoteRecord]:
    """One prepared record of plan attempt ``attempt`` per partition (the smallest token).

    Two prepared records of one partition come from two task attempts of the same rows (a
    Spark task retry while the first one still ran); either holds the partition, and the
    smallest token makes every reader choose the same one. Partitions without a prepared
    record are missing from the result.
    """
    chosen: dict[int, VoteRecord] = {}
    for rec in records:
        if rec.prepared and rec.attempt == attempt and 0 <= rec.partition < parallelism:
            held = chosen.get(rec.partition)
            if held is None or rec.token < held.token:
                chosen[rec.partition] = rec
    return chosen


class Staging:
    """The staging area of one table writer id (``app``) on a pyarrow file system.

    ``root``: the table's root in ``fs``'s paths; ``locate``: the ``fs`` path of a data file
    as a record names it. Every failure is a :class:`LakehouseError`.
    """

    def __init__(
        self, fs: pafs.FileSystem, root: str, app: str, locate: Callable[[str], str]
    ) -> None:
        self.fs, self.app, self.locate = fs, app, locate
        root = root.rstrip("/")
        self.base = f"{root}/{STAGING_DIR}/{app}" if root else f"{STAGING_DIR}/{app}"

    def epoch_dir(self, epoch: int) -> str:
        """Return the directory of ``epoch``'s vote records (an ``fs`` path)."""
        return self._epoch_dir(epoch)

    def _epoch_dir(self, epoch: int) -> str:
        return f"{self.base}/{epoch:020d}"

    def _put(self, path: str, text: str) -> None:
        tmp = path.rsplit("/", 1)
        temp = f"{tmp[0]}/{_TMP}{tmp[1]}"
        try:
            self.fs.create_dir(tmp[0], recursive=True)
            with self.fs.open_output_stream(temp) as out:
                out.write(text.encode())
            self.fs.move(temp, path)
        except OSError as exc:
            msg = f"writing {path} of the staging area of {self.app!r}: {exc}"
            raise LakehouseError(msg, code=WRITE_FAILED) from exc

    def _get(self, path: str) -> str | None:
        try:
            with self.fs.open_input_stream(path) as src:
                return bytes(src.read()).decode()
        except FileNotFoundError:
            return None
        except OSError as exc:
            msg = f"reading {path} of the staging area of {self.app!r}: {exc}"
            raise LakehouseError(msg, code=READ_FAILED) from exc

    def _list(self, path: str) -> list[pafs.FileInfo]:
        import pyarrow.fs as pafs

        try:
            return list(self.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)))
        except OSError as exc:
            msg = f"listing {path} of the staging area of {self.app!r}: {exc}"
            raise LakehouseError(msg, code=READ_FAILED) from exc

    # -- vote records -----------------------------------------------------------------
    def put(self, record: VoteRecord) -> None:
        """Write (or replace) ``record`` durably."""
        self._put(f"{self._epoch_dir(record.epoch)}/{record.name}", record.to_json())

    def records(self, epoch: int) -> list[VoteRecord]:
        """Every vote record of ``epoch`` (any plan attempt, partition and token)."""
        out = []
        for info in self._list(self._epoch_dir(epoch)):
            name = info.base_name
            if name.startswith(_TMP) or name == _INTENT or not name.endswith(".json"):
                continue
            text = self._get(info.path)
            if text is not None:
                out.append(VoteRecord.from_json(text))
        return out

    def epochs(self) -> list[int]:
        """Epochs that have a directory in the staging area, ascending."""
        import pyarrow.fs as pafs

        found = [
            int(i.base_name)
            for i in self._list(self.base)
            if i.type == pafs.FileType.Directory and i.base_name.isdigit()
        ]
        return sorted(found)

    # -- commit intents ---------------------------------------------------------------
    def put_intent(self, epoch: int, attempt: int, tokens: Sequence[str]) -> None:
        """Name the records the commit of ``epoch`` is about to make visible (before it)."""
        doc = {"attempt": attempt, "tokens": sorted(tokens)}
        self._put(f"{self._epoch_dir(epoch)}/{_INTENT}", json.dumps(doc, sort_keys=True))

    def intent(self, epoch: int) -> frozenset[str] | None:
        """Return the tokens of the last commit intent of ``epoch``, if one is left."""
        text = self._get(f"{self._epoch_dir(epoch)}/{_INTENT}")
        return None if text is None else frozenset(json.loads(text)["tokens"])

    # -- deleting ---------------------------------------------------------------------
    def discard(self, record: VoteRecord, *, keep_files: bool = False) -> None:
        """Delete ``record`` and its files (``keep_files``: not its table files); idempotent.

        Files of the staging area itself (``detail["scratch"]``: an upsert's staged changes)
        are deleted in any case: no table's log ever names them.
        """
        for staged in record.files:
            if not keep_files or staged.detail.get("scratch"):
                self._delete(self.locate(staged.path))
        self._delete(f"{self._epoch_dir(record.epoch)}/{record.name}")

    def _delete(self, path: str) -> None:
        try:
            self.fs.delete_file(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            msg = f"deleting {path} of sink {self.app!r}: {exc}"
            raise LakehouseError(msg, code=WRITE_FAILED) from exc

    def finish(self, epoch: int, committed: frozenset[str]) -> None:
        """After ``epoch``'s commit: delete what it did not commit, every record, the intent.

        ``committed``: the tokens whose files the table's log now names (kept).
        """
        for record in self.records(epoch):
            self.discard(record, keep_files=record.token in committed)
        self._delete(f"{self._epoch_dir(epoch)}/{_INTENT}")
        with contextlib.suppress(OSError):  # an empty directory left behind is harmless
            self.fs.delete_dir(self._epoch_dir(epoch))

    def clean(
        self, partitions: Iterable[int], committed_epoch: int | None, *, upto: int | None = None
    ) -> None:
        """Delete what earlier attempts left on ``partitions`` (no task of the sink runs).

        Epochs the table holds (at or below ``committed_epoch``) keep the files their commit
        intent names (a crash between the commit and :meth:`finish`) and lose the rest;
        epochs it does not hold lose the records of ``partitions`` and their files.
        ``upto``: only epochs below it.
        """
        wanted = set(partitions)
        for epoch in self.epochs():
            if upto is not None and epoch >= upto:
                continue
            if committed_epoch is not None and epoch <= committed_epoch:
                self.finish(epoch, self.intent(epoch) or frozenset())
                continue
            records = self.records(epoch)
            for record in records:
                if record.partition in wanted:
                    self.discard(record)
            if all(r.partition in wanted for r in records):
                with contextlib.suppress(OSError):
                    self.fs.delete_dir(self._epoch_dir(epoch))
