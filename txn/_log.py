"""The durable epoch log: the interface and the file implementation.

The epoch log is the coordinator's write-ahead log. It holds, per epoch, the plan
(written before any write task runs), the commit decision (written before it is delivered)
and the completion. A restarted coordinator resolves in-doubt epochs from it.
"""

from __future__ import annotations

import abc
import contextlib
import errno
import fcntl
import os
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import crc32c

from txn._codec import FORMAT_VERSION, corrupt_error, encode_record, record_from_body, seal, unseal
from txn._errors import TxnCode, TxnError
from txn._history import EpochHistory
from txn._model import EpochCompletion, LogRecord

# Committed epochs kept below the last committed one before compaction drops them; enough
# to debug recent history while keeping every append (a full rewrite) small.
DEFAULT_RETAIN_EPOCHS = 100

_Log = TypeVar("_Log", bound="EpochLog")


class EpochLog(abc.ABC):
    """Durable, validated, append-only record of the protocol's decisions for one sink.

    Contract:

    1. ``append(record)`` validates ``record`` against the folded history
       (:func:`~txn._history.check_next_record`; an illegal record raises
       :class:`txn.TxnCode.ILLEGAL_TRANSITION` and is not written) and returns only once the
       record is durable; on an I/O failure it raises :class:`txn.TxnCode.EPOCH_LOG` and the
       record is either fully durable or absent.
    2. ``load()`` returns the folded :class:`~txn.EpochHistory` of everything durable.
    3. ``close()`` releases the log (locks, clients); further calls raise TxnCode.EPOCH_LOG.

    Implementations reuse :func:`~txn._codec.encode_record` / :func:`~txn._codec.decode_record` for the
    bytes and :meth:`EpochHistory.from_records` / :meth:`EpochHistory.with_record` for the
    folding and validation.
    """

    @property
    @abc.abstractmethod
    def sink_id(self) -> str:
        """The sink this log belongs to; every record must carry it."""

    @abc.abstractmethod
    def append(self, record: LogRecord) -> None:
        """Validate and durably append ``record``."""

    def append_all(self, records: Sequence[LogRecord]) -> None:
        """Validate and durably append ``records``, in order.

        A log that can make them durable in one step (one file rewrite, one Kafka
        transaction) overrides this: all of them or none. This default appends them one by
        one, so a failure can leave a prefix durable (a prefix of valid records is valid).
        """
        for record in records:
            self.append(record)

    def append_deferred(self, completion: EpochCompletion) -> None:
        """Append ``completion`` no later than the next append, :meth:`flush` or :meth:`close`.

        This default appends it at once. :class:`~txn._deferred.DeferredCompletionLog` holds it
        and writes it in the same durable step as the next record (docs/architecture.md,
        section 2, "Deferred completion").
        """
        self.append(completion)

    @property
    def pending(self) -> EpochCompletion | None:
        """The completion held by :meth:`append_deferred`, not durable yet (None here)."""
        return None

    def flush(self) -> None:  # noqa: B027 - a log that holds nothing has nothing to flush
        """Make a completion held by :meth:`append_deferred` durable now (nothing here)."""

    @abc.abstractmethod
    def load(self) -> EpochHistory:
        """Return the history of every durable record (and of a deferred completion)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the log. Idempotent."""

    def __enter__(self: _Log) -> _Log:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class FileEpochLog(EpochLog):
    """Epoch log in one local file, crash-safe by whole-file atomic replacement.

    File layout (UTF-8, one sealed JSON object per line, see :mod:`txn._codec`)::

        {"type": "header", "format": 1, "sink_id": ..., "generation": g,
         "committed_through": n | null, "parallelism_floor": p, "crc32c": ...}
        <one encode_record() line per record>
        {"type": "trailer", "records": k, "body_crc32c": ..., "crc32c": ...}

    Protocol of one ``append``:

    1. read and verify the whole file; its ``generation`` must still be ours (else another
       coordinator took over: :class:`txn.TxnCode.EPOCH_LOG_LOCKED`);
    2. fold and validate the new record, compact old committed epochs;
    3. write the new content to ``<name>.tmp``, flush, ``fsync``;
    4. ``rename`` it over the log (atomic), then ``fsync`` the directory.

    A kill at any instant leaves either the old or the new file, never a mix, so a torn or
    altered file can only come from outside and is always reported
    (:class:`txn.TxnCode.EPOCH_LOG_CORRUPT` naming the file). An exclusive ``flock`` on
    ``<name>.lock`` is held while the log is open, and each open bumps the generation, so a
    second coordinator is refused (:class:`txn.TxnCode.EPOCH_LOG_LOCKED`) and a coordinator
    whose lock was broken is fenced at its next append.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        sink_id: str,
        retain_epochs: int = DEFAULT_RETAIN_EPOCHS,
        read_only: bool = False,
    ) -> None:
        """Open (lock, new generation) the log at ``path``, creating it if missing.

        ``read_only``: no lock and no new generation, for operators and checkers while a
        coordinator owns the log: every append replaces the file atomically, so
        :meth:`load` sees one complete version; :meth:`append` raises.
        """
        if not isinstance(sink_id, str) or not sink_id:
            msg = f"sink_id must be a non-empty string, got {sink_id!r}"
            raise TxnError(msg, code=TxnCode.CONFIG)
        if not isinstance(retain_epochs, int) or retain_epochs < 0:
            msg = f"retain_epochs must be an int >= 0, got {retain_epochs!r}"
            raise TxnError(msg, code=TxnCode.CONFIG)
        self._path = Path(path)
        self._sink_id = sink_id
        self._retain = retain_epochs
        self._lock_fd: int | None = None
        self._generation = 0
        self._read_only = read_only
        if read_only:
            return
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._lock()
        try:
            previous = self._read(check_generation=False) if self._path.exists() else None
            self._generation = (previous[1] if previous else 0) + 1
            history = previous[0] if previous else EpochHistory(sink_id)
            self._write(history)
        except BaseException:
            self.close()
            raise

    @property
    def sink_id(self) -> str:
        """The sink this log belongs to."""
        return self._sink_id

    @property
    def path(self) -> Path:
        """The log file."""
        return self._path

    @property
    def generation(self) -> int:
        """How many times the log was opened, this open included (the owner token)."""
        return self._generation

    def append(self, record: LogRecord) -> None:
        """Validate ``record``, then durably rewrite the log with it (see class docstring)."""
        self.append_all((record,))

    def append_all(self, records: Sequence[LogRecord]) -> None:
        """Validate ``records``, then durably rewrite the log with all of them at once."""
        self._check_open()
        if self._read_only:
            msg = f"epoch log {self._path} was opened read-only; it cannot be appended to"
            raise TxnError(msg, code=TxnCode.EPOCH_LOG)
        history, _ = self._read(check_generation=True)
        for record in records:
            history = history.with_record(record)
        self._write(history.compacted(self._retain))

    def load(self) -> EpochHistory:
        """Read, verify and fold the log file."""
        self._check_open()
        return self._read(check_generation=not self._read_only)[0]

    def close(self) -> None:
        """Release the lock. Idempotent."""
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor releases the flock

    # -- locking -----------------------------------------------------------------------
    def _lock(self) -> None:
        lock_path = self._path.with_name(self._path.name + ".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                msg = (
                    f"epoch log {self._path} is locked by another coordinator (pid {holder}); "
                    "only one driver may run sink "
                    f"{self._sink_id!r} at a time: stop the other query first"
                )
                raise TxnError(msg, code=TxnCode.EPOCH_LOG_LOCKED) from None
            raise self._io_error(exc, what="lock") from exc
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd

    def _check_open(self) -> None:
        if self._lock_fd is None and not self._read_only:
            msg = f"epoch log {self._path} is closed; open a new FileEpochLog"
            raise TxnError(msg, code=TxnCode.EPOCH_LOG)

    def _io_error(self, exc: OSError, *, what: str) -> TxnError:
        return TxnError(
            f"cannot {what} epoch log {self._path}: {exc}; check the path, permissions and "
            "free space (the last durable state is intact)",
            code=TxnCode.EPOCH_LOG,
        )

    # -- file format -------------------------------------------------------------------
    def _read(self, *, check_generation: bool) -> tuple[EpochHistory, int]:
        try:
            data = self._path.read_bytes()
        except OSError as exc:
            raise self._io_error(exc, what="read") from exc
        lines = data.split(b"\n")
        if len(lines) < 3 or lines[-1] != b"":
            raise corrupt_error(str(self._path), "file is truncated (no header or trailer)")
        lines.pop()
        header = unseal(lines[0], source=f"{self._path} line 1")
        trailer = unseal(lines[-1], source=f"{self._path} line {len(lines)}")
        self._check_header(header)
        body_crc = f"{crc32c.crc32c(data[: len(data) - len(lines[-1]) - 1]):08x}"
        if trailer != {"type": "trailer", "records": len(lines) - 2, "body_crc32c": body_crc}:
            raise corrupt_error(str(self._path), f"trailer {trailer} does not match the content")
        generation = header["generation"]
        if check_generation and generation != self._generation:
            msg = (
                f"epoch log {self._path} was taken over by another coordinator (generation "
                f"{generation}, ours {self._generation}); this coordinator is fenced: stop it"
            )
            raise TxnError(msg, code=TxnCode.EPOCH_LOG_LOCKED)
        records = [
            record_from_body(
                unseal(line, source=f"{self._path} line {i}"), source=f"{self._path} line {i}"
            )
            for i, line in enumerate(lines[1:-1], start=2)
        ]
        history = EpochHistory.from_records(
            records,
            sink_id=self._sink_id,
            committed_through=header["committed_through"],
            parallelism_floor=header["parallelism_floor"],
        )
        return history, generation

    def _check_header(self, header: dict[str, object]) -> None:
        where = f"{self._path} line 1"
        if header.get("type") != "header" or header.get("format") != FORMAT_VERSION:
            raise corrupt_error(where, f"bad header {header}")
        through = header.get("committed_through")
        if (
            not isinstance(header.get("generation"), int)
            or not isinstance(header.get("parallelism_floor"), int)
            or not (through is None or isinstance(through, int))
        ):
            raise corrupt_error(where, f"bad header {header}")
        if header.get("sink_id") != self._sink_id:
            msg = (
                f"epoch log {self._path} belongs to sink {header.get('sink_id')!r}, not "
                f"{self._sink_id!r}; give every sink its own epoch log path"
            )
            raise TxnError(msg, code=TxnCode.CONFIG)

    def _write(self, history: EpochHistory) -> None:
        header = seal(
            {
                "type": "header",
                "format": FORMAT_VERSION,
                "sink_id": self._sink_id,
                "generation": self._generation,
                "committed_through": history.committed_through,
                "parallelism_floor": history.parallelism_floor,
            }
        )
        body = b"".join(line + b"\n" for line in [header, *map(encode_record, history.records)])
        trailer = seal(
            {
                "type": "trailer",
                "records": len(history.records),
                "body_crc32c": f"{crc32c.crc32c(body):08x}",
            }
        )
        self._replace(body + trailer + b"\n")

    def _replace(self, content: bytes) -> None:
        tmp = self._path.with_name(self._path.name + ".tmp")
        try:
            with open(tmp, "wb") as fh:
                fh.write(content)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self._path)
            dir_fd = os.open(self._path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise self._io_error(exc, what="write") from exc
