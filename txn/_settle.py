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
3. refused (:class:`EpochUnresolvedError`) otherwise: it is partly visible, and only the
   replay of the same batch by the query that planned it can complete it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from txn._errors import EpochUnresolvedError
from txn._log import EpochLog
from txn._model import EpochCompletion, EpochPlan, Resource
from txn._state import EpochState


@dataclass(frozen=True)
class Settlement:
    """What :func:`settle_in_doubt` did: epochs it logged as committed and as aborted."""

    committed: tuple[int, ...] = ()
    aborted: tuple[int, ...] = ()


def settle_in_doubt(log: EpochLog, resource: Resource[Any]) -> Settlement:
    """Settle every epoch in doubt (module docstring); call after ``Coordinator.recover``.

    Raises:
        EpochUnresolvedError: an epoch is partly committed, its decision lost prepared
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
            raise EpochUnresolvedError(msg)
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
            raise EpochUnresolvedError(msg)
    return Settlement(tuple(committed), tuple(aborted))


def _committed_partitions(resource: Resource[Any], plan: EpochPlan) -> tuple[int, ...]:
    try:
        markers = resource.committed_markers(plan)
    except NotImplementedError as exc:
        msg = (
            f"epoch {plan.epoch} of sink {plan.sink_id!r} is in doubt and {exc}; restart the "
            "query that planned it from its checkpoint until the epoch commits"
        )
        raise EpochUnresolvedError(msg) from None
    return tuple(
        p
        for p in range(plan.parallelism)
        if (m := markers.get(p)) is not None and m.epoch >= plan.epoch
    )
