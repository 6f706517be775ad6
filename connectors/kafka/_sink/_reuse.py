"""The pooled strategy's reuse rules, as named predicates, and their driver side.

Why reuse: a write task's transactional producer and marker consumer are expensive to
create and to fence (``_strategy``); Spark reuses Python workers, so the worker that wrote
partition ``p`` of epoch ``N`` can keep them for ``N + 1``. Why it needs rules: a kept
producer is safe only while nobody else initialized its transactional id in between (a
newer instance fences it; committing through a fenced producer fails, and an open
transaction of a dead attempt must be aborted by a fresh ``init_transactions``).

A partition has several transactional ids (*lanes*, ``_lanes``: one per Python worker of
a host, and the shared lane 0 no worker claims), each with at most one live instance.
Tasks report which instance served them (:class:`ProducerNote`, through the stage's back
channel); the driver (:class:`ReusePolicy`) keeps, per partition, the instance it last
saw serve each lane and the marker this generation's tasks committed last, and hands them
to every task of the next stage run in a :class:`ReuseTicket`.

Every rule is one predicate below, with one docstring; :data:`RULES` lists them, and
docs/kafka-sink.md ("The rules") cites each by its full name. Why together they keep at
most one commit per partition and epoch: docs/kafka-sink.md, "Why at most one instance
commits epoch N of partition p".
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from connectors.stage import BackChannel, StageEvent
from connectors.stage._backchannel import StageRun
from connectors.stage._states import ParticipantState
from txn import Marker, PartitionReport
from txn._model import PartitionOutcome

log = logging.getLogger("connectors.kafka.sink.reuse")


# -- the rules -----------------------------------------------------------------------------
def steady_attempt(task_attempt: int, stage_run: int, plan_attempt: int) -> bool:
    """Whether a task is *steady*: the only kind that may serve with a kept producer.

    Steady: the first attempt of the task (Spark's ``attemptNumber`` 0), in the first run
    of the write stage (``stage_run`` 0), of the first plan attempt of the epoch. Any
    other (a Spark task retry, a stage re-run, an in-doubt redo) is a *redo*: it opens a
    new producer that fences every lane of its partition, since the open transaction of a
    dead attempt may be on any lane, and writes on the shared lane. There is one steady
    task per partition and epoch.
    """
    return task_attempt == 0 and stage_run == 0 and plan_attempt == 0


def pooled_in_generation(pooled_generation: str | None, generation: str) -> bool:
    """Whether a kept producer was kept under the driver's current client generation.

    The driver starts a new generation (forgetting every instance and marker it learned)
    at every event after which kept producers may have been fenced by an instance it does
    not know of: a new sink object, recovery, a failed epoch, a stage re-run, a Spark task
    retry, a change of parallelism (``connectors.stage.StageEvent``). ``None``: nothing kept.
    """
    return pooled_generation is not None and pooled_generation == generation


def known_instance(known_token: str | None, pooled_token: str) -> bool:
    """Whether the kept producer is the instance the driver last saw serve its lane.

    ``known_token``: the ticket's instance of the lane (None: none known). Another instance
    of the same lane initialized since (another host's worker of that lane number, a
    redo's fence of every lane) has fenced the kept one.
    """
    return known_token is not None and known_token == pooled_token


def marker_unchanged(read: Marker | None, expected: Marker | None) -> bool:
    """Whether the marker read now is, in every field, the one this generation committed last.

    ``expected``: the marker the driver knows this generation's tasks committed for the
    partition last epoch (not the one the kept producer committed itself: the other lane
    may have written the partition since). Epoch, row count and checksum must all match:
    any difference means an instance the driver does not know committed the partition, so
    the new producer fences every lane.
    """
    return read == expected


def partition_seen(known: Iterable[ProducerNote], partition: int) -> bool:
    """Whether the driver saw this generation's tasks serve ``partition``.

    Until then (the first epoch after start-up, recovery or a renewal) an instance nobody
    reported (e.g. a zombie older than the epoch log) may live on any lane, so a fresh open
    of a steady task fences every lane; once seen, only its own. A prepared note does not
    count: it says a worker initialized a lane, not that the partition's lanes are known.
    """
    return any(n.partition == partition and not n.prepared for n in known)


def fresh_open_on_own_lane(*, steady: bool, gated: bool) -> bool:
    """Whether a new producer may write on the worker's own lane (else the shared lane 0).

    Only a steady task's, in an epoch whose commits wait for a vote round (``gated``:
    aligned): it is initialized before its vote, and a redo starts only after that round
    was closed, so every redo's fence covers it. Unaligned, nothing orders a steady task's
    open against a redo of the same partition, so both write on the shared lane and the
    newer ``init_transactions`` of that one id wins. A kept producer serves its own lane
    in both modes (it was initialized before the epoch was planned).
    """
    return steady and gated


def ended_cleanly(state: ParticipantState, delivery_error: object | None) -> bool:
    """Whether a task's producer may be kept: its transaction ended cleanly.

    Committed, aborted without error, or never begun (a replay that skips), with no failed
    call and no delivery error (state ``DONE``). Anything else (a fenced or fatal producer,
    an abortable error, a task failing with its transaction open) drops the producer
    without closing it; the next ``init_transactions`` of its id aborts its transaction.
    The marker consumer is always kept (it only reads).
    """
    return state is ParticipantState.DONE and delivery_error is None


def may_prepare(*, steady: bool, committed: bool, claimed: bool) -> bool:
    """Whether a worker may prepare producers after a task (``_prepare``).

    Only after a steady task committed, and only on a worker lane the worker claimed (no
    other worker of the host uses it; the shared lane, which redos and unaligned fresh
    opens use, is never claimed). A preparation then starts after a commit: in a gated run
    after every open of that run.
    """
    return steady and committed and claimed


def may_prepare_lane(ticket: ReuseTicket, partition: int, lane: int) -> bool:
    """Whether a worker may prepare its lane ``lane`` of ``partition`` under ``ticket``.

    Not when the ticket knows an instance of that lane (another host's worker of the same
    lane number served it: a preparation would fence it). In ungated (unaligned) runs only
    partitions the driver has seen served (:func:`partition_seen`): their first open
    fences every lane, in no known order against the preparation.
    """
    if ticket.known_token(partition, lane) is not None:
        return False
    return ticket.gated or partition_seen(ticket.known, partition)


def newer_instance_kept(
    kept_generation: str, kept_serial: int, *, generation: str, serial: int
) -> bool:
    """Whether a kept producer is newer than a preparation of its lane would be.

    ``kept_serial``: the ticket under which the driver was last told of the kept producer
    (it served, or was reported prepared), or under which it was prepared. A preparation
    under ticket ``serial`` of ``generation`` is skipped when the kept producer is of that
    generation and as new: a slow round never replaces a newer instance (the driver would
    drop both notes, :func:`prepared_order_known`).
    """
    return kept_generation == generation and kept_serial >= serial


def recorded_run(serial: int, *, gated: bool) -> int:
    """Return the run a note of the run with ticket ``serial`` counts as recorded in.

    In a gated run every open precedes every commit (the vote round) and preparations
    start only after a commit, so the run's own notes count as recorded one run earlier:
    before the preparations begun under its ticket. In an ungated run a fence of every lane
    of the same run (a first open, a Spark task retry) may come after a preparation.
    """
    return serial - 1 if gated else serial


def prepared_order_known(serial: int, *, since: int, fenced_at: int, noted_at: int) -> bool:
    """Whether a prepared note may be learned: its order against other instances is known.

    ``serial``: the ticket it was prepared under; ``since``: the first ticket of this
    generation; ``fenced_at``: the run (:func:`recorded_run`) of the partition's last note
    that fenced every lane; ``noted_at``: the run of its lane's last note. Dropped when
    prepared under an older generation, or when such a note was recorded in the run it was
    prepared under or later: which of the two initialized last is unknown (then the lane's
    note is dropped too).
    """
    return serial >= since and fenced_at < serial and noted_at < serial


RULES: tuple[Callable[..., object], ...] = (
    steady_attempt,
    pooled_in_generation,
    known_instance,
    marker_unchanged,
    partition_seen,
    fresh_open_on_own_lane,
    ended_cleanly,
    may_prepare,
    may_prepare_lane,
    newer_instance_kept,
    recorded_run,
    prepared_order_known,
)
"""Every reuse rule; docs/kafka-sink.md cites each by name (tests/test_docs.py checks it)."""


# -- what travels ----------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ProducerNote:
    """Which producer instance served write partition ``partition`` (a task's back-channel note).

    ``lane``: which of the partition's transactional ids; ``token``: the instance (minted
    by its ``init_transactions``); ``fenced_all``: its opening fenced every lane of the
    partition; ``reused``: a kept instance served (nothing initialized); ``prepared``: the
    instance was prepared between tasks for a partition the worker did not write, under
    the ticket numbered ``serial``; it served nothing yet.
    """

    partition: int
    lane: int
    token: str
    fenced_all: bool = False
    reused: bool = False
    prepared: bool = False
    serial: int = 0


@dataclass(frozen=True, kw_only=True)
class ReuseDecision:
    """Answer of :meth:`ReuseTicket.decide`: reuse or not, why, and the marker read.

    ``fence_all``: a new producer must fence every lane of the partition.
    """

    reuse: bool
    reason: str
    marker: Marker | None = None
    marker_read: bool = False
    fence_all: bool = True


@dataclass(frozen=True, kw_only=True)
class ReuseTicket:
    """What a write task needs to decide on reuse: the back channel's ticket of a stage run.

    ``gated``: the epoch's commits wait for a vote round (aligned). ``known``: the instance
    the driver last saw serve (or prepare) each lane of each partition; ``markers``: the
    marker each partition committed last epoch in this generation (both from the tasks'
    notes). ``serial``: the ticket's number (the driver's tickets count up).
    """

    generation: str
    plan_attempt: int = 0
    stage_run: int = 0
    gated: bool = False
    known: tuple[ProducerNote, ...] = ()
    markers: tuple[tuple[int, Marker], ...] = ()
    serial: int = 0

    def steady(self, task_attempt: int) -> bool:
        """Whether attempt ``task_attempt`` of a task of this run is steady (:func:`steady_attempt`)."""
        return steady_attempt(task_attempt, self.stage_run, self.plan_attempt)

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
        pooled: ProducerNote | None,
        pooled_generation: str | None,
        read_marker: Callable[[], Marker | None],
    ) -> ReuseDecision:
        """Decide whether the kept producer ``pooled`` serves; ``read_marker`` only if needed.

        ``pooled`` None: nothing is kept (else its lane and token, ``pooled_generation`` the
        generation it was kept under). Applies :func:`steady_attempt`,
        :func:`pooled_in_generation`, :func:`known_instance`, :func:`marker_unchanged`; a
        new producer fences every lane unless :func:`partition_seen`.
        """
        if not self.steady(task_attempt):
            why = "a retry or redo: new clients fence the dead attempt"
            return ReuseDecision(reuse=False, reason=why)
        fence_all = not partition_seen(self.known, partition)
        if pooled is None:
            return ReuseDecision(reuse=False, reason="no kept producer", fence_all=fence_all)
        if not pooled_in_generation(pooled_generation, self.generation):
            why = "kept under an older client generation"
            return ReuseDecision(reuse=False, reason=why, fence_all=fence_all)
        if not known_instance(self.known_token(partition, pooled.lane), pooled.token):
            why = f"lane {pooled.lane} was last served by another instance"
            return ReuseDecision(reuse=False, reason=why, fence_all=fence_all)
        marker = read_marker()
        expected = dict(self.markers).get(partition)
        if not marker_unchanged(marker, expected):
            why = f"marker {marker} is not the {expected} this generation committed"
            return ReuseDecision(reuse=False, reason=why, marker=marker, marker_read=True)
        why = "the kept producer still owns its lane"
        return ReuseDecision(
            reuse=True, reason=why, marker=marker, marker_read=True, fence_all=False
        )


def _new_generation() -> str:
    return uuid.uuid4().hex


def _describe(note: ProducerNote) -> str:
    """One note for the debug log (tokens name instances; they are no secret)."""
    how = "prepared" if note.prepared else "reused" if note.reused else "new"
    fenced = ", every lane fenced" if note.fenced_all else ""
    at = f" under ticket {note.serial}" if note.prepared else ""
    return f"partition {note.partition} lane {note.lane}: {how} {note.token}{at}{fenced}"


class ReusePolicy(BackChannel[ReuseTicket, ProducerNote]):
    """The driver side: the generation, the instances and markers it knows (a back channel)."""

    def __init__(self) -> None:
        self._generation = _new_generation()
        self._known: dict[tuple[int, int], ProducerNote] = {}
        self._markers: dict[int, Marker] = {}
        # prepared_order_known: the last ticket's serial and whether its run was gated; the
        # first serial of this generation; per partition the run of its last fence of every
        # lane and per lane the run of its last note (recorded_run).
        self._serial = 0
        self._gated = False
        self._since = 1
        self._fenced_at: dict[int, int] = {}
        self._noted_at: dict[tuple[int, int], int] = {}

    @property
    def generation(self) -> str:
        """The current client generation."""
        return self._generation

    def on_event(self, event: StageEvent) -> None:
        """Every event of ``StageEvent`` may have fenced kept producers: a new generation."""
        self.renew(event.value)

    def renew(self, why: str) -> None:
        """Start a new generation: producers kept before now are not reused."""
        self._generation = _new_generation()
        self._known.clear()
        self._markers.clear()
        self._since = self._serial + 1
        log.debug("new client generation (%s)", why)

    def observe(
        self, run: StageRun, reports: Sequence[PartitionReport], notes: Sequence[ProducerNote]
    ) -> None:
        """Learn from a stage run that succeeded: who served each lane, what each partition committed.

        Served notes first, in their order (a fence of every lane forgets the partition's
        other lanes); then the prepared ones (:func:`prepared_order_known`).
        """
        ours = [n for n in notes if isinstance(n, ProducerNote)]
        recorded = recorded_run(self._serial, gated=self._gated)
        for note in ours:
            if note.prepared:
                continue
            if note.fenced_all:
                for key in [k for k in self._known if k[0] == note.partition]:
                    del self._known[key]
                self._fenced_at[note.partition] = recorded
            self._known[(note.partition, note.lane)] = note
            self._noted_at[(note.partition, note.lane)] = recorded
            if log.isEnabledFor(logging.DEBUG):
                log.debug("ticket %d: %s learned", self._serial, _describe(note))
        for note in ours:
            if note.prepared:
                self._learn_prepared(note)
        for report in reports:
            if report.outcome is PartitionOutcome.COMMITTED:
                self._markers[report.partition] = Marker(report.epoch, report.rows, report.checksum)
            else:
                self._markers.pop(report.partition, None)

    def _learn_prepared(self, note: ProducerNote) -> None:
        """Record a prepared instance if :func:`prepared_order_known`, else drop it."""
        key = (note.partition, note.lane)
        fenced_at = self._fenced_at.get(note.partition, 0)
        noted_at = self._noted_at.get(key, 0)
        if prepared_order_known(
            note.serial, since=self._since, fenced_at=fenced_at, noted_at=noted_at
        ):
            self._known[key] = note
            self._noted_at[key] = self._serial
            fate = "learned"
        elif note.serial < self._since:
            fate = f"dropped: prepared before this generation (ticket {self._since})"
        elif fenced_at >= note.serial:
            fate = f"dropped: every lane fenced at ticket {fenced_at}"
        else:
            self._known.pop(key, None)  # which of the two initialized last is unknown
            fate = f"dropped with the lane's note of ticket {noted_at}"
        if log.isEnabledFor(logging.DEBUG):
            log.debug("ticket %d: %s %s", self._serial, _describe(note), fate)

    def ticket(self, run: StageRun) -> ReuseTicket:
        """Return the ticket of ``run`` (the stage announced a parallelism change before)."""
        self._serial += 1
        self._gated = run.gated
        if log.isEnabledFor(logging.DEBUG):
            known = sorted((k, n.token) for k, n in self._known.items())
            log.debug(
                "ticket %d (plan attempt %d, stage run %d, gated %s): knows %s",
                self._serial,
                run.plan_attempt,
                run.stage_run,
                run.gated,
                known,
            )
        return ReuseTicket(
            generation=self._generation,
            plan_attempt=run.plan_attempt,
            stage_run=run.stage_run,
            gated=run.gated,
            known=tuple(self._known.values()),
            markers=tuple(sorted(self._markers.items())),
            serial=self._serial,
        )
