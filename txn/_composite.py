"""One epoch across several resources: a composite :class:`~txn.Resource`.

The members' write partitions are numbered one after the other: member ``m`` owns the
global partitions ``offset_m .. offset_m + P_m - 1`` (its local partitions
``0 .. P_m - 1``), so one plan, one vote round and one epoch log cover all of them. Each
member sees a plan of its own parallelism (``member_plan``) and its local partition.

Kafka-like members (commit in the task) and PostgreSQL-like members (completed by the
coordinator) may be mixed: the coordinator commits the completable partitions only after
every commit-in-task partition has committed the epoch (docs/architecture.md, "Mixed
epochs"). The split of partitions is part of the fingerprint, so an epoch in doubt is
never replayed with another split.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from txn._errors import TxnCode, TxnError
from txn._model import EpochPlan, Marker, Participant, Resource


@dataclass(frozen=True)
class Member:
    """One resource of a composite and how many write partitions it gets per epoch."""

    resource: Resource[Any]
    parallelism: int


class CompositeResource(Resource[Any]):
    """Several resources as one; the rows of a partition go to the member that owns it."""

    def __init__(self, members: Sequence[Member]) -> None:
        if not members or any(m.parallelism < 1 for m in members):
            msg = "a composite resource needs members with parallelism >= 1"
            raise TxnError(msg, code=TxnCode.CONFIG)
        self.members = tuple(members)
        offsets, start = [], 0
        for member in self.members:
            offsets.append(start)
            start += member.parallelism
        self.offsets = tuple(offsets)
        self.parallelism = start
        flags = {m.resource.completable_by_coordinator for m in self.members}
        self.completable_by_coordinator = flags == {True}
        self.reads_markers = all(m.resource.reads_markers for m in self.members)

    def locate(self, partition: int) -> tuple[int, int]:
        """Return ``(member index, local partition)`` of global ``partition``."""
        for index in range(len(self.members) - 1, -1, -1):
            if partition >= self.offsets[index]:
                local = partition - self.offsets[index]
                if local < self.members[index].parallelism:
                    return index, local
                break
        msg = f"partition {partition} is outside 0..{self.parallelism - 1}"
        raise TxnError(msg, code=TxnCode.CONFIG)

    def member_plan(self, plan: EpochPlan, index: int) -> EpochPlan:
        """Return the plan member ``index`` sees: the epoch's, with the member's parallelism."""
        return dataclasses.replace(plan, parallelism=self.members[index].parallelism)

    @property
    def mixed(self) -> bool:
        """True when commit-in-task and coordinator-completable members share the epoch."""
        return len({m.resource.completable_by_coordinator for m in self.members}) > 1

    def completes(self, partition: int) -> bool:
        """Return the owning member's flag."""
        index, _ = self.locate(partition)
        return self.members[index].resource.completable_by_coordinator

    def open(self, plan: EpochPlan, partition: int) -> Participant[Any]:
        """Open the owning member's participant of its local partition."""
        index, local = self.locate(partition)
        return self.members[index].resource.open(self.member_plan(plan, index), local)

    def fingerprint(self) -> str:
        """Digest of every member's fingerprint and the split of partitions."""
        parts = [f"{m.parallelism}:{m.resource.fingerprint()}" for m in self.members]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]

    def abort_lingering(self, partitions: Iterable[int]) -> None:
        """Each member aborts lingering work on every local partition below the global count.

        The split of an older plan is not known here, and a member's local partitions never
        outnumbered the global ones, so each member cleans ``0 .. max(partitions)``: a
        superset of what any earlier plan gave it.
        """
        top = max(partitions, default=-1) + 1
        for member in self.members:
            if top:
                member.resource.abort_lingering(range(top))

    def commit_prepared(self, plan: EpochPlan, partition: int) -> None:
        """COMMIT the owning member's prepared work."""
        index, local = self.locate(partition)
        self.members[index].resource.commit_prepared(self.member_plan(plan, index), local)

    def rollback_prepared(self, plan: EpochPlan, partition: int) -> None:
        """ROLL BACK the owning member's prepared work."""
        index, local = self.locate(partition)
        self.members[index].resource.rollback_prepared(self.member_plan(plan, index), local)

    def committed_markers(self, plan: EpochPlan) -> Mapping[int, Marker | None]:
        """Every member's markers, by global partition."""
        out: dict[int, Marker | None] = {}
        for index, member in enumerate(self.members):
            local = member.resource.committed_markers(self.member_plan(plan, index))
            out.update({self.offsets[index] + p: m for p, m in local.items()})
        return out

    def prepared_partitions(self, plan: EpochPlan) -> Sequence[int]:
        """Global partitions of ``plan`` whose work is still prepared."""
        out: list[int] = []
        for index, member in enumerate(self.members):
            local = member.resource.prepared_partitions(self.member_plan(plan, index))
            out += [self.offsets[index] + p for p in local]
        return sorted(out)
