"""``DeferredCompletionLog``: one epoch-log write per epoch instead of two.

The completion of a commit-in-task exactly-once epoch N is not written on its own: it is
held and written in the same durable step as the next record (the plan of epoch N+1),
so an epoch costs one log write (docs/architecture.md, section 2, "Deferred completion").
The rules:

1. :meth:`append_deferred` validates the completion against the history and holds it;
   :meth:`load` returns the history with it folded in, so every reader of this log
   object (recovery, the query binding, resume, the next epoch) sees the epoch committed,
   which it is: the completion is only ever deferred once every partition committed;
2. the next :meth:`append` writes the held completion and the record with one
   :meth:`EpochLog.append_all` (one file rewrite, one Kafka transaction);
3. :meth:`flush` writes it on its own; :meth:`close` flushes first (the sink's
   ``close``, ``stop_gracefully``, a take-over by another sink object);
4. after a crash the durable log shows the epoch planned without a completion; the
   recovery rule settles it by its markers (``txn._settle.settle_previous``), never
   redoing it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from txn._history import EpochHistory
from txn._log import EpochLog
from txn._model import EpochCompletion, LogRecord

_log = logging.getLogger("txn")


class DeferredCompletionLog(EpochLog):
    """Wraps an :class:`EpochLog`, holding a deferred completion until the next write."""

    def __init__(self, inner: EpochLog) -> None:
        self._inner = inner
        self._pending: EpochCompletion | None = None
        self._unsure = False  # a write with the held completion failed: it may be durable

    @property
    def inner(self) -> EpochLog:
        """The wrapped log."""
        return self._inner

    @property
    def sink_id(self) -> str:
        """The wrapped log's sink."""
        return self._inner.sink_id

    @property
    def pending(self) -> EpochCompletion | None:
        """The held completion (rule 1), None once it is durable."""
        return self._pending

    def append_deferred(self, completion: EpochCompletion) -> None:
        """Rule 1: validate ``completion`` and hold it (a completion held before is written)."""
        self.load().with_record(completion)  # TxnCode.ILLEGAL_TRANSITION: nothing changes
        if self._pending is not None:
            self.flush()
        self._pending = completion

    def load(self) -> EpochHistory:
        """Return the wrapped log's history, with the held completion folded in."""
        history = self._inner.load()
        held = self._held(history)
        return history if held is None else history.with_record(held)

    def append(self, record: LogRecord) -> None:
        """Rule 2: write ``record``, with the held completion first if there is one."""
        self.append_all((record,))

    def append_all(self, records: Sequence[LogRecord]) -> None:
        """Rule 2 for several records."""
        held = self._held(self._inner.load()) if self._unsure else self._pending
        if held is None:
            self._pending = None
            if records:
                self._inner.append_all(records)
            return
        try:
            self._inner.append_all((held, *records))
        except BaseException:
            self._unsure = True
            raise
        self._pending = None
        self._unsure = False

    def flush(self) -> None:
        """Rule 3: write the held completion now (nothing if none is held)."""
        if self._pending is not None:
            self.append_all(())

    def close(self) -> None:
        """Rule 3: flush, then close the wrapped log (a failed flush is logged, not raised).

        A completion that could not be written is settled by its markers after the
        restart (rule 4), so closing never fails on it.
        """
        try:
            self.flush()
        except Exception:  # noqa: BLE001 - rule 4 settles it; closing must not fail on it
            _log.warning(
                "sink %s: the completion of epoch %s could not be written at close; the "
                "next start settles it by its markers",
                self.sink_id,
                None if self._pending is None else self._pending.epoch,
                exc_info=True,
            )
        finally:
            self._inner.close()

    def _held(self, history: EpochHistory) -> EpochCompletion | None:
        """Return the held completion, unless the durable history has it (a failed write)."""
        held = self._pending
        if held is not None and not history.state(held.epoch).in_doubt:
            self._pending = None
            self._unsure = False
            return None
        return held
