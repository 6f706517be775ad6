"""Settling epochs in doubt for a new query that will never replay them.

A query resumed from the output (docs/operations.md, "Changing a query") runs on a new
checkpoint: Spark will not replay the old query's last batch, so an epoch the old query
left in doubt must be settled first, from what is durable. After
:meth:`Coordinator.recover` (which finishes every epoch a coordinator can complete and
fences every lingering transaction), each epoch still in doubt is:

1. committed, when every write partition's marker shows it (only the completion was not
   logged);
2. aborted (``EpochCompletion(committed=False)``), when no partition's marker shows it:
   nothing of it is visible, and the new query takes the epoch over;
3. refused (:class:`TxnCode.EPOCH_UNRESOLVED`) otherwise: it is partly visible, and only the
   replay of the same batch by the query that planned it can complete it.

:func:`settle_previous` is the same query's rule for a deferred completion lost in a crash
(docs/architecture.md, section 2, "Deferred completion"): Spark asks for epoch N+1 only
once its call for N returned, so N committed everywhere and its markers must say so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from txn._errors import TxnCode, TxnError
from txn._history import EpochHistory
from txn._log import EpochLog
from txn._model import EpochCompletion, EpochPlan, Guarantee, Marker, Resource
from txn._state import EpochState


@dataclass(frozen=True)
class Settlement:
    """What :func:`settle_in_doubt` did: epochs it logged as committed and as aborted."""

    committed: tuple[int, ...] = ()
    aborted: tuple[int, ...] = ()


def settle_in_doubt(log: EpochLog, resource: Resource[Any]) -> Settlement:
    """Settle every epoch in doubt (module docstring); call after ``Coordinator.recover``.

    Raises:
        TxnCode.EPOCH_UNRESOLVED: an epoch is partly committed, its decision lost prepared
            work, or the resource cannot read its markers from the driver.

    """
    history = log.load()
    committed: list[int] = []
    aborted: list[int] = []
    for plan in history.in_doubt():
        if history.state(plan.epoch) is not EpochState.PLANNED:
            msg = (
                f"epoch {plan.epoch} of sink {plan.sink_id!r} has a logged commit decision "
                "that did not reach every partition; restart the query that planned it from "
                "its checkpoint so its replay completes the epoch, then change the query"
            )
            raise TxnError(msg, code=TxnCode.EPOCH_UNRESOLVED)
        done = _committed_partitions(resource, plan)
        if len(done) == plan.parallelism:
            log.append(EpochCompletion(plan.sink_id, plan.epoch, committed=True))
            committed.append(plan.epoch)
        elif not done:
            log.append(EpochCompletion(plan.sink_id, plan.epoch, committed=False))
            aborted.append(plan.epoch)
        else:
            missing = sorted(set(range(plan.parallelism)) - set(done))
            msg = (
                f"epoch {plan.epoch} of sink {plan.sink_id!r} committed on write partitions "
                f"{list(done)} but not on {missing}: it is partly visible, and only the query "
                "that planned it can complete it (the replay of the same batch). Restart that "
                "query from its checkpoint until the epoch commits, then change the query"
            )
            raise TxnError(msg, code=TxnCode.EPOCH_UNRESOLVED)
    return Settlement(tuple(committed), tuple(aborted))


def settle_previous(
    history: EpochHistory, resource: Resource[Any], epoch: int
) -> EpochCompletion | None:
    """Return the completion of ``epoch - 1`` to log with the plan of ``epoch``, if it is due.

    Applies when ``epoch`` is new and ``epoch - 1`` is a commit-in-task exactly-once epoch
    planned without a completion, on a resource that reads its markers: the completion
    that the coordinator deferred (:meth:`~txn.EpochLog.append_deferred`) was lost in a
    crash after the call for ``epoch - 1`` returned. Every partition's marker must cover
    it; then it is completed, never redone. None when the rule does not apply.

    Raises:
        TxnCode.EPOCH_UNRESOLVED: some marker does not cover ``epoch - 1`` (the call for it did
            not return, or the output or its markers were changed outside the sink).

    """
    previous = history.plan(epoch - 1)
    if (
        history.entry(epoch) is not None
        or previous is None
        or history.state(previous.epoch) is not EpochState.PLANNED
        or previous.guarantee is not Guarantee.EXACTLY_ONCE
        or not resource.reads_markers
        or any(resource.completes(p) for p in range(previous.parallelism))
    ):
        return None
    done = _committed_partitions(resource, previous)
    if len(done) == previous.parallelism:
        return EpochCompletion(previous.sink_id, previous.epoch, committed=True)
    missing = sorted(set(range(previous.parallelism)) - set(done))
    msg = (
        f"sink {previous.sink_id!r} is asked for epoch {epoch}, so the call for epoch "
        f"{previous.epoch} returned, but its completion is not logged and the markers of "
        f"write partitions {missing} do not show it (committed on {list(done)}): the output "
        "or its markers were changed outside the sink, or a function around the sink "
        "swallowed the error of that epoch. Nothing of epoch "
        f"{epoch} was written; replay epoch {previous.epoch} (restart the query from a "
        "checkpoint that has not committed it) or repair the output"
    )
    raise TxnError(msg, code=TxnCode.EPOCH_UNRESOLVED)


def deferred_completion(
    history: EpochHistory, markers: Mapping[int, Marker | None]
) -> EpochCompletion | None:
    """Return the completion a running (or crashed) sink deferred, if the markers show it.

    For readers that do not own the log (``eos status``, ``eos offsets``, ``eos reset``):
    the last epoch of the log, planned exactly-once without a completion, whose every
    write partition's marker shows it, is committed; only its completion is not written
    yet (docs/architecture.md, "Deferred completion"). None otherwise.
    """
    doubtful = history.in_doubt()
    if len(doubtful) != 1:
        return None
    plan = doubtful[0]
    if (
        plan.epoch != history.max_epoch()
        or history.state(plan.epoch) is not EpochState.PLANNED
        or plan.guarantee is not Guarantee.EXACTLY_ONCE
        or len(_covered(plan, markers)) < plan.parallelism
    ):
        return None
    return EpochCompletion(plan.sink_id, plan.epoch, committed=True)


def _committed_partitions(resource: Resource[Any], plan: EpochPlan) -> tuple[int, ...]:
    try:
        markers = resource.committed_markers(plan)
    except NotImplementedError as exc:
        msg = (
            f"epoch {plan.epoch} of sink {plan.sink_id!r} is in doubt and {exc}; restart the "
            "query that planned it from its checkpoint until the epoch commits"
        )
        raise TxnError(msg, code=TxnCode.EPOCH_UNRESOLVED) from None
    return _covered(plan, markers)


def _covered(plan: EpochPlan, markers: Mapping[int, Marker | None]) -> tuple[int, ...]:
    """Write partitions of ``plan`` whose committed marker shows its epoch (or a later one)."""
    return tuple(
        p
        for p in range(plan.parallelism)
        if (m := markers.get(p)) is not None and m.epoch >= plan.epoch
    )
