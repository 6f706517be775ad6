"""The plan of an epoch: a new one, or the pinned retry of one in doubt (steps 2 and 4).

docs/architecture.md, section 2: an epoch in doubt is retried with its pinned plan (same
parallelism, fingerprint, guarantee, mode and input: every row lands in the same write
partition and meets the same marker); a new or aborted epoch is planned freely.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from txn._errors import TxnCode, TxnError
from txn._history import EpochHistory
from txn._model import CommitMode, EpochPlan, Guarantee
from txn._offsets import InputOffsets, check_same_input
from txn._state import EpochState


@dataclasses.dataclass(frozen=True)
class PlanSettings:
    """What a coordinator plans new epochs with."""

    sink_id: str
    guarantee: Guarantee
    mode: CommitMode


def check_pinned(previous: EpochPlan, settings: PlanSettings, fingerprint: str) -> None:
    """Raise :class:`TxnCode.PLAN_MISMATCH` if ``previous`` cannot be retried as it was planned."""
    if previous.fingerprint != fingerprint:
        msg = (
            f"the sink configuration changed while epoch {previous.epoch} was in doubt "
            f"(planned fingerprint {previous.fingerprint}, now {fingerprint}); restore the "
            "previous sink configuration until that epoch has committed, then change it"
        )
        raise TxnError(msg, code=TxnCode.PLAN_MISMATCH)
    if (previous.guarantee, previous.mode) != (settings.guarantee, settings.mode):
        msg = (
            f"epoch {previous.epoch} is in doubt with guarantee {previous.guarantee.value} "
            f"and mode {previous.mode.value}, but the coordinator runs "
            f"{settings.guarantee.value} / {settings.mode.value}; keep the old settings until "
            "that epoch has committed"
        )
        raise TxnError(msg, code=TxnCode.PLAN_MISMATCH)


def next_plan(
    settings: PlanSettings,
    epoch: int,
    parallelism: int,
    history: EpochHistory,
    input_offsets: InputOffsets | None,
    fingerprint: Callable[[], str],
) -> EpochPlan:
    """Return the plan to log for ``epoch``: the pinned retry, or a new plan."""
    previous = history.plan(epoch)
    pinned = (EpochState.PLANNED, EpochState.COMMIT_DECIDED)
    if previous is not None and history.state(epoch) in pinned:
        check_same_input(previous.epoch, previous.input, input_offsets)
        return dataclasses.replace(previous, attempt=previous.attempt + 1)
    # A new epoch, or an aborted one: nothing of it is visible, so it is planned freely.
    return EpochPlan(
        sink_id=settings.sink_id,
        epoch=epoch,
        parallelism=parallelism,
        fingerprint=fingerprint(),
        guarantee=settings.guarantee,
        mode=settings.mode,
        attempt=0 if previous is None else previous.attempt + 1,
        input=input_offsets,
    )


def check_int(name: str, value: int, minimum: int) -> None:
    """Raise :class:`TxnCode.CONFIG` unless ``value`` is an int >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        msg = f"{name} must be an int >= {minimum}, got {value!r}"
        raise TxnError(msg, code=TxnCode.CONFIG)
