"""How many write tasks each member of a sink gets in an epoch, and in which mode it runs.

A member's width is explicit when its options say it (``parallelism``, or its input's
partitions with ``keep_partitioning``); the members without one share a budget: the
composite's own ``parallelism`` option if given, else Spark's default parallelism, which
in aligned mode is capped by the task slots the application has (a barrier stage needs a
slot per task; on a one-core cluster ``defaultParallelism`` still says 2). The shared
members split what the explicit ones leave as evenly as possible, the first ones taking
the remainder, each at least one task. So ``CompositeSink([kafka, pg])`` with default
options runs on ``local[2]`` (one task each).

Rules that keep the protocol intact (docs/architecture.md, section 10):

* an epoch in doubt is replayed with the split it was planned with (the split is part of
  the composite's fingerprint): the shares are the ones whose fingerprint matches its
  plan, and its mode is the plan's;
* a composite whose ``mode`` was not given runs an epoch unaligned when even one task per
  member exceeds the slots (a one-core application), with a warning; with ``mode``
  given, or an epoch in doubt planned aligned, the slot error names the members to
  change and by how much (:func:`slot_error`).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from connectors.stage._errors import StageCode, StageError
from connectors.stage._options import StageOptions
from connectors.stage._slots import may_grow, task_slots, wait_for_task_slots
from txn import CommitMode, EpochHistory, EpochPlan

log = logging.getLogger("connectors.stage")

# Splits tried to find the one an epoch in doubt was planned with (bounds the search).
MAX_PINNED_SPLITS = 10_000


@dataclass(frozen=True)
class Width:
    """A member's write tasks: ``tasks``, and whether its options fixed them (``why``)."""

    sink_id: str
    tasks: int | None  # None: a share of the budget
    why: str = ""  # "its parallelism option" / "its input partitions (keep_partitioning)"


@dataclass(frozen=True)
class EpochShape:
    """The widths of the members (in order) and the options the epoch runs with.

    ``refusal``: the slot error to raise at the epoch's slot check (step 3, after
    recovery: a composite that does not fit still finishes its prepared work first).
    """

    widths: tuple[int, ...]
    options: StageOptions
    refusal: StageError | None = None

    def check(self) -> None:
        """Raise :attr:`refusal`, if any."""
        if self.refusal is not None:
            raise self.refusal


def split(budget: int, widths: Sequence[Width]) -> list[int]:
    """Give the shared members (``tasks`` None) what the explicit ones leave of ``budget``."""
    shared = [i for i, w in enumerate(widths) if w.tasks is None]
    out = [w.tasks or 0 for w in widths]
    if shared:
        left = budget - sum(out)
        share, extra = divmod(max(left, 0), len(shared))
        for rank, index in enumerate(shared):
            out[index] = max(1, share + (1 if rank < extra else 0))
    return out


def usable_slots(sc: Any, wanted: int) -> int:
    """Return the application's task slots, waiting for executors while none registered.

    ``wanted`` when a Spark Connect server's configuration does not tell its slots: Spark's
    own barrier check decides then (``_slots``).
    """
    try:
        slots = task_slots(sc)
    except StageError as exc:
        if sc is None or exc.code is not StageCode.SPARK_CONNECT:
            raise
        return wanted
    if slots.total < wanted and may_grow(slots, sc):
        slots = wait_for_task_slots(sc, wanted)
    return slots.total


def budget(options: StageOptions, sc: Any, default: int) -> int:
    """Return the tasks the shared members split: the option, else ``default`` (slot-capped)."""
    if options.parallelism:
        return options.parallelism
    if not options.aligned or sc is None:
        return default
    return max(1, min(default, usable_slots(sc, default)))


def pinned(
    plan: EpochPlan, computed: list[int], widths: Sequence[Width], fingerprint: Callable[..., str]
) -> list[int] | None:
    """Return the split of the shared members that gives ``plan``'s fingerprint, if any.

    ``fingerprint(split)`` is the composite's fingerprint with that split.
    """
    if sum(computed) == plan.parallelism and fingerprint(computed) == plan.fingerprint:
        return computed
    shared = [i for i, w in enumerate(widths) if w.tasks is None]
    left = plan.parallelism - sum(w.tasks or 0 for w in widths)
    if not shared or left < len(shared):
        return None
    # Compositions of ``left`` into len(shared) parts >= 1: choose the cut points.
    cuts = itertools.combinations(range(1, left), len(shared) - 1)
    for cut in itertools.islice(cuts, MAX_PINNED_SPLITS):
        bounds = (0, *cut, left)
        candidate = list(computed)
        for rank, index in enumerate(shared):
            candidate[index] = bounds[rank + 1] - bounds[rank]
        if fingerprint(candidate) == plan.fingerprint:
            return candidate
    return None


def member_width(sink_id: str, options: StageOptions, frame: Any) -> Width:
    """Return a member's explicit width (its options), or a share (``tasks`` None)."""
    if options.keep_partitioning:
        partitions = max(1, int(frame.rdd.getNumPartitions()))
        return Width(sink_id, partitions, "its input partitions (keep_partitioning)")
    if options.parallelism:
        return Width(sink_id, options.parallelism, "its parallelism option")
    return Width(sink_id, None)


def shape_epoch(
    options: StageOptions,
    widths: Sequence[Width],
    default: int,
    sc: Any,
    *,
    history: EpochHistory | None = None,
    fingerprint: Callable[[list[int]], str] | None = None,
    auto_mode: bool = False,
) -> EpochShape:
    """Return the members' widths and the epoch's options (the module docstring's rules).

    ``default``: Spark's default parallelism; ``history`` and ``fingerprint`` (a
    composite's) pin an epoch in doubt; ``auto_mode``: the composite's ``mode`` was not
    given, so a one-core application runs unaligned.

    Aligned widths that exceed the slots come back as the shape's ``refusal`` (naming
    whom to change), raised by :meth:`EpochShape.check`.
    """
    computed = split(budget(options, sc, default), widths)
    doubt = history.in_doubt() if history is not None else []
    if doubt and fingerprint is not None and len(widths) > 1:
        computed = pinned(doubt[-1], computed, widths, fingerprint) or computed
    if doubt and auto_mode:
        options = dataclasses.replace(options, mode=doubt[-1].mode)
    if options.aligned and sc is not None and len(widths) > 1:
        slots = usable_slots(sc, sum(computed))
        if sum(computed) > slots:
            if auto_mode and not doubt and len(widths) > slots:
                log.warning(
                    "the composite's %d members need a task slot each in aligned mode, but "
                    "the application has %d: running the epoch unaligned (give the "
                    "application more slots for aligned epochs, or pass mode='unaligned')",
                    len(widths),
                    slots,
                )
                return EpochShape(
                    tuple(computed), dataclasses.replace(options, mode=CommitMode.UNALIGNED)
                )
            return EpochShape(
                tuple(computed), options, slot_error(options, widths, computed, slots)
            )
    return EpochShape(tuple(computed), options)


def slot_error(
    options: StageOptions, widths: Sequence[Width], computed: Sequence[int], slots: int
) -> StageError:
    """Return the error saying which member to change, and by how much, to fit ``slots``."""
    total = sum(computed)
    excess = total - slots
    parts = ", ".join(
        f"{w.sink_id!r} {n} ({w.why or 'a share of the slots'})"
        for w, n in zip(widths, computed, strict=True)
    )
    fixes: list[str] = []
    if options.parallelism and options.parallelism > slots:
        fixes.append(f"lower the composite's parallelism by {excess} (to {slots})")
        excess = 0
    explicit = sorted(
        ((n, w) for w, n in zip(widths, computed, strict=True) if w.tasks is not None),
        key=lambda pair: -pair[0],
    )
    for n, w in explicit:
        cut = min(excess, n - 1)
        if cut > 0:
            fixes.append(f"lower {w.sink_id!r}'s parallelism by {cut} (to {n - cut})")
            excess -= cut
    if excess > 0:
        fixes.append(f"give the application {excess} more task slot(s)")
    msg = (
        f"aligned mode runs all {total} write tasks of an epoch at once, but Spark has only "
        f"{slots} task slot(s); the members' tasks: {parts}. To fit: {'; '.join(fixes)}; or "
        "use mode='unaligned' (an epoch in doubt keeps the split and mode it was planned "
        "with until it has committed)"
    )
    return StageError(msg, code=StageCode.INSUFFICIENT_SLOTS)
