"""Client reuse across epochs: the one owner of the rules.

Why reuse: a write task's clients (a transactional producer and its marker consumer, a
database connection) are expensive to create and to fence; Spark reuses Python workers,
so the worker that wrote partition ``p`` of epoch ``N`` can keep them for ``N + 1``.
Why it needs rules: a kept client is only safe while nobody else used its identity in
between (a newer instance fences it; committing through a fenced producer fails, and an
open transaction of a dead attempt must be aborted by a fresh ``init``).

A partition may have several identities (*lanes*: Kafka's producer lanes, one per Python
worker of a host, and the *shared lane* 0 that no worker claims), each with at most one
live instance. Tasks report which instance
served them (:class:`ClientNote`); the driver keeps, per partition, the instance it last
saw serve each lane and the marker this generation's tasks committed last.

The rules:

1. only the first attempt of a task, in the first run of the write stage, of the first
   plan attempt of an epoch may reuse; any retry, stage re-run or in-doubt redo opens
   fresh clients that fence *every* lane of the partition (``fence_all``);
2. the driver's *client generation* must be the one the client was pooled under; the
   driver starts a new generation whenever clients of the sink may have been fenced by
   an instance the pooled ones do not know of: recovery, a failed epoch, a stage re-run,
   a Spark task retry, a change of parallelism;
3. the pooled instance must be the one the driver last saw serve its lane (a report of
   the generation's tasks: its initialization ended before this epoch's stage began);
4. the marker read now must equal the marker the driver knows this generation's tasks
   committed last epoch; otherwise an unknown instance committed, and the fresh clients
   fence every lane;
5. a fresh open in a first attempt (rule 1) fences only its own lane, every lane when the
   driver has not yet seen this generation's tasks serve the partition (a *prepared* note
   does not count as serving). A fresh open writes on a worker's own lane only in
   epochs whose commits are gated by a vote round (``gated``: aligned); otherwise it
   writes on the shared lane 0, as every redo does, so a slow first attempt and a retry
   meet on one identity. A reused instance (rules 2-4) may serve its own lane in any
   epoch;
6. *prepared* instances (initialized by a worker between its tasks, on the worker lane it
   claimed, never the shared lane, for partitions it did not write,
   ``ClientNote.prepared``) are learned like served ones, except when their
   order against another initialization of the partition is unknown: a prepared note is
   dropped if it was prepared under a ticket of an older generation, or if, in the run
   whose ticket it was prepared under or in a later run, a note of the partition fenced
   every lane or a note of its lane was recorded (then that note is dropped too). In a
   gated run every open precedes every commit, and preparations start only after a
   commit, so that run's own notes count as recorded before its preparations; in an
   ungated run a fence-all of the same run (a first open, a retry) may come after them.

Why these keep at most one commit per partition and epoch: docs/kafka-sink.md,
"Producer reuse across epochs". :class:`ReusePolicy` (driver) owns the generation, the
known instances and markers; the :class:`ReuseTicket` it issues for one stage run
travels to the tasks and answers the task-side questions. Connectors ask the ticket;
none of them re-implements a rule.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from txn import CommitMode, EpochPlan, Guarantee, Marker, PartitionOutcome, PartitionReport

log = logging.getLogger("connectors.stage.reuse")


def _new_generation() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class ClientNote:
    """Which client instance served write partition ``partition`` (picklable; a task reports it).

    ``lane``: which of the partition's identities; ``token``: the instance (minted when it
    was initialized); ``fenced_all``: its opening fenced every lane of the partition;
    ``reused``: a pooled instance served (nothing initialized); ``prepared``: the instance
    was initialized between tasks for a partition the worker did not write (rule 6), under
    the ticket numbered ``serial``; it served nothing yet.
    """

    partition: int
    lane: int
    token: str
    fenced_all: bool
    reused: bool = False
    prepared: bool = False
    serial: int = 0


@dataclass(frozen=True)
class ReuseDecision:
    """Answer of :meth:`ReuseTicket.decide`: reuse or not, why, and the marker read.

    ``fence_all``: a fresh open must fence every lane of the partition (rules 1, 4).
    """

    reuse: bool
    reason: str
    marker: Marker | None = None
    marker_read: bool = False
    fence_all: bool = True


@dataclass(frozen=True)
class ReuseTicket:
    """What a write task needs to decide on reuse (picklable; in the task spec).

    ``gated``: the epoch's commits wait for a vote round (aligned): only then may a task
    open fresh on its own lane, not the shared lane 0 (rule 5). ``known``: the instance
    the driver last saw serve (or prepare) each lane of each partition; ``markers``: the
    marker each partition committed last epoch in this generation (both from the tasks'
    reports). ``serial``: the ticket's number (the driver's tickets count up; rule 6).
    """

    generation: str
    plan_attempt: int = 0
    stage_run: int = 0
    gated: bool = False
    known: tuple[ClientNote, ...] = ()
    markers: tuple[tuple[int, Marker], ...] = ()
    serial: int = 0

    def may_reuse(self, task_attempt: int) -> bool:
        """Rule 1: True only for the first attempt of everything."""
        return task_attempt == 0 and self.stage_run == 0 and self.plan_attempt == 0

    def known_token(self, partition: int, lane: int) -> str | None:
        """Return the instance the driver last saw serve ``lane`` of ``partition`` (or None)."""
        for note in self.known:
            if note.partition == partition and note.lane == lane:
                return note.token
        return None

    def decide(
        self,
        task_attempt: int,
        partition: int,
        pooled: ClientNote | None,
        pooled_generation: str | None,
        read_marker: Callable[[], Marker | None],
    ) -> ReuseDecision:
        """Apply rules 1-5 to a pooled client; ``read_marker`` is called only if needed.

        ``pooled`` None: nothing is pooled (else its lane and token, ``pooled_generation``
        the generation it was pooled under).
        """
        if not self.may_reuse(task_attempt):
            return ReuseDecision(False, "a retry or redo: fresh clients fence the dead attempt")
        # Rule 5; a partition this generation has not seen served yet may have instances
        # the driver never heard of on any lane (e.g. a zombie from before recovery).
        unseen = not any(n.partition == partition and not n.prepared for n in self.known)
        if pooled is None:
            return ReuseDecision(False, "no pooled client", fence_all=unseen)
        if pooled_generation != self.generation:
            why = "pooled under an older client generation"
            return ReuseDecision(False, why, fence_all=unseen)
        if self.known_token(partition, pooled.lane) != pooled.token:
            why = f"lane {pooled.lane} was last served by another instance"
            return ReuseDecision(False, why, fence_all=unseen)
        marker = read_marker()
        expected = dict(self.markers).get(partition)
        if marker != expected:
            why = f"marker {marker} is not the {expected} this generation committed"
            return ReuseDecision(False, why, marker, True)
        return ReuseDecision(True, "pooled client still owns its lane", marker, True, False)


def _describe(note: ClientNote) -> str:
    """One note for the debug log (tokens name instances; they are no secret)."""
    how = "prepared" if note.prepared else "reused" if note.reused else "new"
    fenced = ", every lane fenced" if note.fenced_all else ""
    at = f" under ticket {note.serial}" if note.prepared else ""
    return f"partition {note.partition} lane {note.lane}: {how} {note.token}{at}{fenced}"


class ReusePolicy:
    """Driver side: the generation, the instances and markers it knows (rules 2-4, 6)."""

    def __init__(self) -> None:
        self._generation = _new_generation()
        self._parallelism: int | None = None
        self._known: dict[tuple[int, int], ClientNote] = {}
        self._markers: dict[int, Marker] = {}
        # Rule 6: the last ticket's serial and whether its run was gated; the first serial
        # of this generation; per partition the run of its last fence-all and per lane the
        # run of its last note (a gated run's own notes count one run earlier).
        self._serial = 0
        self._gated = False
        self._since = 1
        self._fenced_at: dict[int, int] = {}
        self._noted_at: dict[tuple[int, int], int] = {}

    @property
    def generation(self) -> str:
        """The current client generation."""
        return self._generation

    def renew(self, why: str) -> None:
        """Start a new generation: clients pooled before now are not reused."""
        self._generation = _new_generation()
        self._known.clear()
        self._markers.clear()
        self._since = self._serial + 1
        log.debug("new client generation (%s)", why)

    def observe(self, reports: Iterable[PartitionReport], notes: Iterable[ClientNote]) -> None:
        """Learn from a successful stage run: who served each lane, what each partition committed.

        Served notes first, in their order (a fence-all forgets the partition's other
        lanes); then the prepared ones (rule 6).
        """
        notes = list(notes)
        run = self._serial - 1 if self._gated else self._serial  # rule 6: gated runs
        for note in notes:
            if note.prepared:
                continue
            if note.fenced_all:
                for key in [k for k in self._known if k[0] == note.partition]:
                    del self._known[key]
                self._fenced_at[note.partition] = run
            self._known[(note.partition, note.lane)] = note
            self._noted_at[(note.partition, note.lane)] = run
            if log.isEnabledFor(logging.DEBUG):
                log.debug("ticket %d: %s learned", self._serial, _describe(note))
        for note in notes:
            if note.prepared:
                self._learn_prepared(note)
        for report in reports:
            if report.outcome is PartitionOutcome.COMMITTED:
                self._markers[report.partition] = Marker(report.epoch, report.rows, report.checksum)
            else:
                self._markers.pop(report.partition, None)

    def _learn_prepared(self, note: ClientNote) -> None:
        """Rule 6: record a prepared instance unless its order against another is unknown."""
        key = (note.partition, note.lane)
        fate = "learned"
        if note.serial < self._since:
            fate = f"dropped: prepared before this generation (ticket {self._since})"
        elif self._fenced_at.get(note.partition, 0) >= note.serial:
            fate = f"dropped: every lane fenced at ticket {self._fenced_at[note.partition]}"
        elif self._noted_at.get(key, 0) >= note.serial:
            self._known.pop(key, None)  # which of the two initialized last is unknown
            fate = f"dropped with the lane's note of ticket {self._noted_at[key]}"
        else:
            self._known[key] = note
            self._noted_at[key] = self._serial
        if log.isEnabledFor(logging.DEBUG):
            log.debug("ticket %d: %s %s", self._serial, _describe(note), fate)

    def ticket(self, plan: EpochPlan, stage_run: int) -> ReuseTicket:
        """Return the ticket of one run of ``plan``'s write stage.

        A change of parallelism renews the generation first: the shrink's lingering-abort
        fenced the ids beyond the new parallelism.
        """
        if plan.parallelism != self._parallelism:
            if self._parallelism is not None:
                self.renew(f"parallelism {self._parallelism} -> {plan.parallelism}")
            self._parallelism = plan.parallelism
        gated = plan.guarantee is Guarantee.EXACTLY_ONCE and plan.mode is CommitMode.ALIGNED
        self._serial += 1
        self._gated = gated
        if log.isEnabledFor(logging.DEBUG):
            known = sorted((k, n.token) for k, n in self._known.items())
            log.debug(
                "ticket %d (plan attempt %d, stage run %d, gated %s): knows %s",
                self._serial,
                plan.attempt,
                stage_run,
                gated,
                known,
            )
        return ReuseTicket(
            self._generation,
            plan.attempt,
            stage_run,
            gated,
            tuple(self._known.values()),
            tuple(sorted(self._markers.items())),
            self._serial,
        )
