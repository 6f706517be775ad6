"""Folding epoch-log records into an immutable history, with the legality rules.

Shared by every :class:`~txn.EpochLog` implementation: a log reads its records, builds the
history with :meth:`EpochHistory.from_records` (which validates every record against the
ones before it), and before appending a record calls :func:`check_next_record` (or
:meth:`EpochHistory.with_record`), so an illegal record never reaches durable storage.

Rules for a record of epoch ``e`` (beyond the state machine of :class:`~txn.EpochState`):

1. its ``sink_id`` is the log's sink id;
2. a plan of a new epoch needs ``attempt == 0``, ``e`` above every epoch in the log and
   every earlier epoch committed (an unfinished epoch must be replayed first);
3. a plan of a known epoch is a retry: ``attempt`` is the previous attempt + 1; retrying a
   still in-doubt epoch (state ``PLANNED``) keeps parallelism, fingerprint, guarantee and
   mode (rows must land in the same partitions);
4. decisions and completions follow the state machine; a logged commit decision can only
   be completed as committed; a plan of a ``COMMIT_DECIDED`` epoch is a redo (pinned like
   rule 3) that keeps the epoch ``COMMIT_DECIDED`` and its decision: it redoes partitions
   whose prepared work was lost, and no abort decision can follow;
5. a query binding (:class:`~txn.QueryBinding`) of another query than the bound one needs
   every epoch finished and committed, and an offset above every epoch in the log (the new
   query's batches are new epochs); filling in the query id of an open binding ("") keeps
   its offset; the first binding of a log may adopt the log's epochs (offset 0). An
   aborted last epoch (nothing of it visible) may be taken over instead: the new query's
   offset is that epoch, whose next plan is free (``ABORTED -> PLANNED``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from txn._errors import TxnCode, TxnError
from txn._model import EpochCompletion, EpochDecision, EpochPlan, LogRecord, QueryBinding
from txn._state import EpochState


@dataclass(frozen=True, kw_only=True)
class EpochEntry:
    """Everything the log says about one epoch's latest attempt."""

    plan: EpochPlan
    state: EpochState
    decision: EpochDecision | None = None
    completion: EpochCompletion | None = None


def _illegal(record: LogRecord, why: str) -> TxnError:
    kind = type(record).__name__
    return TxnError(
        f"cannot log {kind} of epoch {record.epoch}: {why}", code=TxnCode.ILLEGAL_TRANSITION
    )


class EpochHistory:
    """Immutable view of an epoch log: the folded state of every epoch it remembers.

    Old committed epochs may have been compacted away: ``committed_through`` is the
    highest compacted epoch (every epoch up to it is committed) and ``parallelism_floor``
    the largest parallelism any compacted plan used.
    """

    __slots__ = (
        "_entries",
        "_records",
        "binding",
        "committed_through",
        "parallelism_floor",
        "sink_id",
    )

    def __init__(
        self,
        sink_id: str,
        *,
        committed_through: int | None = None,
        parallelism_floor: int = 0,
    ) -> None:
        self.sink_id = sink_id
        self.committed_through = committed_through
        self.parallelism_floor = parallelism_floor
        self.binding: QueryBinding | None = None  # the query that writes the sink, if bound
        self._records: tuple[LogRecord, ...] = ()
        self._entries: Mapping[int, EpochEntry] = {}

    @classmethod
    def from_records(
        cls,
        records: Iterable[LogRecord],
        *,
        sink_id: str,
        committed_through: int | None = None,
        parallelism_floor: int = 0,
    ) -> EpochHistory:
        """Fold ``records`` (oldest first), validating each; raise TxnCode.ILLEGAL_TRANSITION."""
        history = cls(
            sink_id, committed_through=committed_through, parallelism_floor=parallelism_floor
        )
        for record in records:
            history = history.with_record(record)
        return history

    def _copy(
        self,
        records: tuple[LogRecord, ...],
        entries: Mapping[int, EpochEntry],
        binding: QueryBinding | None,
    ) -> EpochHistory:
        out = EpochHistory(
            self.sink_id,
            committed_through=self.committed_through,
            parallelism_floor=self.parallelism_floor,
        )
        out.binding = binding
        out._records = records
        out._entries = entries
        return out

    def with_record(self, record: LogRecord) -> EpochHistory:
        """Return a new history with ``record`` appended, after validating it."""
        if isinstance(record, QueryBinding):
            _check_binding(self, record)
            kept = tuple(r for r in self._records if not isinstance(r, QueryBinding))
            return self._copy((*kept, record), self._entries, record)  # the latest binding only
        new_state = check_next_record(self, record)
        old = self._entries.get(record.epoch)
        entry: EpochEntry
        if isinstance(record, EpochPlan):
            decision = old.decision if new_state is EpochState.COMMIT_DECIDED and old else None
            entry = EpochEntry(plan=record, state=new_state, decision=decision)
        else:
            assert old is not None  # noqa: S101 - check_next_record guarantees a plan exists
            if isinstance(record, EpochDecision):
                entry = EpochEntry(plan=old.plan, state=new_state, decision=record)
            else:
                entry = EpochEntry(
                    plan=old.plan, state=new_state, decision=old.decision, completion=record
                )
        return self._copy(
            (*self._records, record), {**self._entries, record.epoch: entry}, self.binding
        )

    # -- queries ---------------------------------------------------------------------
    @property
    def records(self) -> tuple[LogRecord, ...]:
        """The records still held (after compaction), oldest first."""
        return self._records

    def epochs(self) -> list[int]:
        """Epochs held in the history, ascending (compacted ones excluded)."""
        return sorted(self._entries)

    def entry(self, epoch: int) -> EpochEntry | None:
        """Return the folded entry of ``epoch``, or None if the log holds nothing for it."""
        return self._entries.get(epoch)

    def plan(self, epoch: int) -> EpochPlan | None:
        """Return the plan of the latest attempt of ``epoch``, if held."""
        entry = self._entries.get(epoch)
        return entry.plan if entry else None

    def decision(self, epoch: int) -> EpochDecision | None:
        """Return the decision of ``epoch``'s latest attempt (kept by a redo plan), if logged."""
        entry = self._entries.get(epoch)
        return entry.decision if entry else None

    def completion(self, epoch: int) -> EpochCompletion | None:
        """Return the completion of the latest attempt of ``epoch``, if one was logged."""
        entry = self._entries.get(epoch)
        return entry.completion if entry else None

    def state(self, epoch: int) -> EpochState:
        """Return the state of ``epoch`` (``COMMITTED`` for compacted epochs, ``NEW`` if unknown)."""
        entry = self._entries.get(epoch)
        if entry is not None:
            return entry.state
        if self.committed_through is not None and epoch <= self.committed_through:
            return EpochState.COMMITTED
        return EpochState.NEW

    def in_doubt(self) -> list[EpochPlan]:
        """Plans of epochs planned but not completed (PLANNED or decided), ascending."""
        return [e.plan for _, e in sorted(self._entries.items()) if e.state.in_doubt]

    def unfinished(self) -> list[int]:
        """Epochs that are not committed (in doubt or aborted): they must be replayed."""
        return [ep for ep, e in sorted(self._entries.items()) if not e.state.is_final]

    def max_epoch(self) -> int | None:
        """Return the highest epoch the log knows of (including compacted ones)."""
        known = max(self._entries, default=None)
        if known is None:
            return self.committed_through
        return max(known, self.committed_through if self.committed_through is not None else -1)

    def latest_plan(self) -> EpochPlan | None:
        """Return the plan of the highest epoch held, if any."""
        if not self._entries:
            return None
        return self._entries[max(self._entries)].plan

    def max_parallelism(self) -> int:
        """Return the largest parallelism ever planned (0 if none)."""
        held = max((e.plan.parallelism for e in self._entries.values()), default=0)
        return max(held, self.parallelism_floor)

    def last_committed_epoch(self) -> int | None:
        """Return the highest committed epoch, or None if no epoch ever committed."""
        done = [ep for ep, e in self._entries.items() if e.state is EpochState.COMMITTED]
        best = max(done, default=None)
        if self.committed_through is None:
            return best
        return self.committed_through if best is None else max(best, self.committed_through)

    def last_committed_plan(self) -> EpochPlan | None:
        """Return the plan of the highest committed epoch, if the log still holds it."""
        last = self.last_committed_epoch()
        entry = None if last is None else self._entries.get(last)
        return None if entry is None else entry.plan

    def is_committed(self, epoch: int) -> bool:
        """Whether ``epoch`` is committed (its replay must be skipped)."""
        return self.state(epoch) is EpochState.COMMITTED

    def compacted(self, retain_epochs: int) -> EpochHistory:
        """Drop committed epochs, keeping the last committed one and ``retain_epochs`` below it."""
        last = self.last_committed_epoch()
        if last is None:
            return self
        horizon = last - retain_epochs - 1
        drop = {
            ep
            for ep, e in self._entries.items()
            if ep <= horizon and e.state is EpochState.COMMITTED
        }
        if not drop:
            return self
        through = max(drop)
        if self.committed_through is not None:
            through = max(through, self.committed_through)
        floor = max([self.parallelism_floor, *(self._entries[ep].plan.parallelism for ep in drop)])
        out = EpochHistory(self.sink_id, committed_through=through, parallelism_floor=floor)
        out.binding = self.binding
        out._records = tuple(
            r for r in self._records if isinstance(r, QueryBinding) or r.epoch not in drop
        )
        out._entries = {ep: e for ep, e in self._entries.items() if ep not in drop}
        return out

    def __repr__(self) -> str:
        states = ", ".join(f"{ep}:{e.state.value}" for ep, e in sorted(self._entries.items()))
        return (
            f"EpochHistory(sink_id={self.sink_id!r}, committed_through={self.committed_through}, "
            f"binding={self.binding}, epochs=[{states}])"
        )

    def epoch_of(self, batch_id: int) -> int:
        """Return the epoch of the bound query's batch ``batch_id`` (the batch id if unbound)."""
        return batch_id + (self.binding.epoch_offset if self.binding is not None else 0)


def _check_binding(history: EpochHistory, binding: QueryBinding) -> None:
    """Rule 5 of the module docstring; raise TxnCode.ILLEGAL_TRANSITION."""
    if binding.sink_id != history.sink_id:
        raise _illegal(
            binding, f"the binding belongs to sink {binding.sink_id!r}, not {history.sink_id!r}"
        )
    current = history.binding
    if binding.epoch_offset < 0:
        raise _illegal(binding, "the epoch offset must be >= 0")
    if current is not None and current.query_id == "" and binding.query_id:
        if binding.epoch_offset != current.epoch_offset:
            raise _illegal(
                binding,
                f"binding the next query keeps the reset's epoch offset {current.epoch_offset}",
            )
        return
    adopting = current is None and binding.epoch_offset == 0
    if adopting:
        return
    pending = history.unfinished()
    top = history.max_epoch()
    if top is not None and pending == [top] and history.state(top) is EpochState.ABORTED:
        if binding.epoch_offset != top:
            raise _illegal(
                binding,
                f"a new query takes over the aborted epoch {top}, not {binding.epoch_offset}",
            )
        return
    if pending:
        raise _illegal(
            binding,
            f"epoch {pending[0]} is not committed; finish it with the query "
            "that planned it (its checkpoint) before binding another query",
        )
    if top is not None and binding.epoch_offset <= top:
        raise _illegal(
            binding, f"a new query's epochs start above epoch {top}, not at {binding.epoch_offset}"
        )


def check_next_record(history: EpochHistory, record: LogRecord) -> EpochState:
    """Return the state ``record`` moves its epoch to, or raise TxnCode.ILLEGAL_TRANSITION.

    Pure: neither argument is modified. See the module docstring for the rules. A query
    binding is checked by :meth:`EpochHistory.with_record` (it moves no epoch).
    """
    if isinstance(record, QueryBinding):
        msg = "a query binding moves no epoch; append it with EpochHistory.with_record"
        raise _illegal(record, msg)
    if record.sink_id != history.sink_id:
        msg = (
            f"record belongs to sink {record.sink_id!r} but the log is sink "
            f"{history.sink_id!r}; each sink needs its own epoch log"
        )
        raise _illegal(record, msg)
    if record.epoch < 0:
        raise _illegal(record, "epochs are non-negative")
    current = history.state(record.epoch)
    entry = history.entry(record.epoch)
    if isinstance(record, EpochPlan):
        _check_plan(history, record, current, entry)
        if current is EpochState.COMMIT_DECIDED:  # a redo keeps the commit decision
            return current.transition(EpochState.COMMIT_DECIDED, epoch=record.epoch)
        return current.transition(EpochState.PLANNED, epoch=record.epoch)
    if entry is None:
        raise _illegal(record, f"the epoch has no plan in the log (state {current.value})")
    if isinstance(record, EpochDecision):
        target = EpochState.COMMIT_DECIDED if record.commit else EpochState.ABORT_DECIDED
        if current is not EpochState.PLANNED:
            raise _illegal(record, f"a decision needs state planned, not {current.value}")
        return current.transition(target, epoch=record.epoch)
    target = EpochState.COMMITTED if record.committed else EpochState.ABORTED
    return current.transition(target, epoch=record.epoch)


def _check_plan(
    history: EpochHistory, plan: EpochPlan, current: EpochState, entry: EpochEntry | None
) -> None:
    if plan.parallelism < 1:
        raise _illegal(plan, f"parallelism must be >= 1, got {plan.parallelism}")
    if entry is None:
        if current is EpochState.COMMITTED:
            raise _illegal(plan, "the epoch is already committed (compacted out of the log)")
        if plan.attempt != 0:
            raise _illegal(plan, f"the first plan of an epoch has attempt 0, not {plan.attempt}")
        top = history.max_epoch()
        if top is not None and plan.epoch <= top:
            raise _illegal(plan, f"epochs must increase; the log already reached epoch {top}")
        pending = history.unfinished()
        if pending:
            raise _illegal(
                plan,
                f"epoch {pending[0]} is not committed; replay it (restart the query from its "
                "checkpoint) before planning a later epoch",
            )
        return
    prev = entry.plan
    if plan.attempt != prev.attempt + 1:
        raise _illegal(plan, f"a retry must have attempt {prev.attempt + 1}, not {plan.attempt}")
    if current in (EpochState.PLANNED, EpochState.COMMIT_DECIDED):
        same = (prev.parallelism, prev.fingerprint, prev.guarantee, prev.mode, prev.input) == (
            plan.parallelism,
            plan.fingerprint,
            plan.guarantee,
            plan.mode,
            plan.input,
        )
        if not same:
            raise _illegal(
                plan,
                "an in-doubt epoch is retried with its original parallelism, fingerprint, "
                f"guarantee, mode and input ({prev}), got {plan}",
            )
