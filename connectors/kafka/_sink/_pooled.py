"""The pooled producer strategy: producers kept by each Python worker across epochs.

A task takes its transactional id's clients out of the worker's pool as a lease
(``_pool``; the id: partition ``p`` on the worker's lane, ``_lanes``) and asks the stage
run's :class:`~connectors.kafka._sink._reuse.ReuseTicket` (the back channel's ticket,
``_reuse``) whether the kept producer may serve. Otherwise a spare or new producer runs
``init_transactions``, fencing every older instance of its lane (and every other lane of
the partition when the ticket says ``fence_all``); the participant reads the marker after
it. The task reports the instance that served it (``_reuse.ProducerNote``). At its end the
lease keeps the producer only after a clean end (``_reuse.ended_cleanly``), spares are
topped up, finished preparations are reported and, after a commit, new ones start
(``_prepare``). The rules: ``_reuse``; docs/kafka-sink.md, "Producer reuse across epochs".
"""

from __future__ import annotations

from connectors.kafka._sink import _pool
from connectors.kafka._sink._config import SinkConfig
from connectors.kafka._sink._lanes import SHARED_LANE
from connectors.kafka._sink._markers import marker_consumer, read_marker
from connectors.kafka._sink._prepare import prepare_lanes, report_prepared
from connectors.kafka._sink._producers import (
    fence,
    fill_spares,
    init_transactions,
    lane_ids,
    new_producer,
    plain_pool_key,
    pool_key,
)
from connectors.kafka._sink._reuse import (
    ProducerNote,
    ReuseDecision,
    ReuseTicket,
    fresh_open_on_own_lane,
    may_prepare,
)
from connectors.kafka._sink._strategy import Clients, TaskProducers, close_consumer
from connectors.kafka._sink._writer import DeliveryErrors
from connectors.stage import TaskInfo
from txn import EpochPlan


class _Leased(TaskProducers):
    """What both pooled kinds share: the lease of one pool key."""

    _lease: _pool.Lease | None = None

    def __init__(self, pool: _pool.ClientPool) -> None:
        self._pool = pool
        self._empty = _pool.PoolEntry(producer=None, errors=DeliveryErrors(), consumer=None)

    @property
    def clients(self) -> _pool.PoolEntry:
        """The leased entry (empty before :meth:`open`)."""
        return self._empty if self._lease is None else self._lease.clients

    def _serve_kept(self) -> None:
        """Serve with the kept producer (its delivery errors start afresh)."""
        self.clients.errors.first, self.clients.errors.count = None, 0
        self.reused = True


class PooledPlain(_Leased):
    """At-least-once / at-most-once: one kept idempotent producer per worker and settings.

    Nothing fences an idempotent producer, so any task of the worker may use it after
    another; it goes back to the pool after a clean end with its queue flushed.
    """

    def __init__(
        self, cfg: SinkConfig, task: TaskInfo[object] | None, pool: _pool.ClientPool
    ) -> None:
        super().__init__(pool)
        self._cfg = cfg
        self._task = task

    def open(self) -> str:
        """Lease the worker's producer, or create one."""
        self._lease = self._pool.acquire(plain_pool_key(self._cfg))
        if self._lease.pooled_producer:
            self._serve_kept()
            return ""
        clients = self.clients
        clients.errors = DeliveryErrors()
        clients.producer = new_producer(self._cfg, None, clients.errors)
        if self._task is not None:
            self._task.count_new_client()
        return "no transactions"

    def close(self, *, clean: bool, committed: bool) -> None:
        """Give the producer back if ``clean``."""
        if self._lease is not None:
            self._lease.release(clean=clean)


class PooledTransactional(_Leased):
    """Exactly-once: the kept producer of partition ``partition`` on this worker's lane."""

    def __init__(
        self,
        cfg: SinkConfig,
        plan: EpochPlan,
        partition: int,
        task: TaskInfo[object] | None,
        pool: _pool.ClientPool,
    ) -> None:
        super().__init__(pool)
        self._cfg = cfg
        self._plan = plan
        self._partition = partition
        self._task = task
        ticket = task.ticket if task is not None else None
        self._ticket = ticket if isinstance(ticket, ReuseTicket) else None
        self._lane = SHARED_LANE

    @property
    def _steady(self) -> bool:
        """A steady task (``_reuse.steady_attempt``); without a ticket, never."""
        task, ticket = self._task, self._ticket
        return task is not None and ticket is not None and ticket.steady(task.task_attempt)

    @property
    def _txn_id(self) -> str:
        return self._cfg.transactional_id(self._partition, self._lane)

    def _first_lane(self) -> int:
        """Return the lane whose kept clients the task leases first.

        The worker's own lane, except: without a ticket (driver-side use) and for an
        unaligned redo, the shared lane (``SHARED_LANE``, no worker claims it); and when
        the producer kept on the own lane is not the one the driver knows while the shared
        lane's is (or unaligned: whenever the own lane's is not known), the shared lane:
        the worker keeps using a producer there while the driver knows it serves it.
        """
        own = self._pool.lanes.claim(self._cfg.sink_id, self._cfg.producer_lanes).index
        ticket, task = self._ticket, self._task
        if ticket is None or task is None or (not ticket.gated and not self._steady):
            return SHARED_LANE
        if own == SHARED_LANE:
            return own
        mine = self._pool.token_of(pool_key(self._cfg, self._partition, own))
        shared = self._pool.token_of(pool_key(self._cfg, self._partition, SHARED_LANE))
        stale = mine is None or mine != ticket.known_token(task.partition, own)
        shared_known = shared is not None and shared == ticket.known_token(
            task.partition, SHARED_LANE
        )
        return SHARED_LANE if stale and (not ticket.gated or shared_known) else own

    def open(self) -> str:
        """Lease the lane's clients; serve with the kept producer if the rules allow it."""
        self._lane = self._first_lane()
        self._lease = self._pool.acquire(pool_key(self._cfg, self._partition, self._lane))
        clients = self.clients
        spare = None
        try:
            if clients.consumer is None:
                spare = self._lease.take_spare()
                if spare is not None and spare.consumer is not None:
                    clients.consumer = spare.consumer
                else:
                    group = self._cfg.marker_group(self._partition)
                    clients.consumer = marker_consumer(self._cfg.cluster, group)
            return self._reuse_or_init(spare)
        except BaseException:
            consumer, self.clients.consumer = self.clients.consumer, None
            close_consumer(consumer)
            self._lease.release(clean=False)
            raise

    def _decide(self, task: TaskInfo[object], ticket: ReuseTicket) -> ReuseDecision:
        """Ask the ticket whether the kept producer serves (``_reuse`` owns the rules)."""
        clients = self.clients
        consumer = clients.consumer
        assert consumer is not None  # noqa: S101 - set by the caller
        kept = None
        if self._lease is not None and self._lease.pooled_producer:
            kept = ProducerNote(partition=task.partition, lane=self._lane, token=clients.token)
        return ticket.decide(
            task.task_attempt,
            task.partition,
            kept,
            clients.generation if kept is not None else None,
            lambda: read_marker(consumer, self._cfg.marker_topic),
        )

    def _reuse_or_init(self, spare: _pool.Spare | None) -> str:
        task, ticket = self._task, self._ticket
        if task is None or ticket is None:
            why, fence_all = "no reuse ticket (driver-side use)", True
        else:
            decision = self._decide(task, ticket)
            if decision.reuse:
                self._serve_kept()
                self.marker = decision.marker
                self._note(fenced_all=False, reused=True)
                return decision.reason
            why, fence_all = decision.reason, decision.fence_all
        gated = ticket is not None and ticket.gated
        if self._lane != SHARED_LANE and not fresh_open_on_own_lane(
            steady=self._steady, gated=gated
        ):
            self._move_to_shared_lane()
            spare = None  # made for the lane left
        clients = self.clients
        if spare is None:
            spare = self._lease.take_spare() if self._lease is not None else None
            if spare is not None:  # the kept consumer serves
                close_consumer(spare.consumer)
        if spare is not None:
            clients.errors, clients.producer = spare.errors, spare.producer
            why += "; a spare producer, created earlier"
        else:
            clients.errors = DeliveryErrors()
            clients.producer = new_producer(self._cfg, self._txn_id, clients.errors)
        clients.token = self._init(clients, fence_all)
        self._note(fenced_all=fence_all, reused=False)
        return f"{why}; every lane fenced" if fence_all else why

    def _note(self, *, fenced_all: bool, reused: bool) -> None:
        """Report the instance serving this task (and count a new one)."""
        task = self._task
        if task is None:
            return
        note = ProducerNote(
            partition=task.partition,
            lane=self._lane,
            token=self.clients.token,
            fenced_all=fenced_all,
            reused=reused,
        )
        task.send(note)
        if not reused:
            task.count_new_client()

    def _move_to_shared_lane(self) -> None:
        """Write on the shared lane: redos (two then fence each other), unaligned fresh opens.

        The marker consumer comes along; this worker's kept producer of the lane left is
        dropped (the fence of every lane fences it anyway).
        """
        assert self._lease is not None  # noqa: S101 - leased by open
        consumer = self.clients.consumer
        self.clients.consumer = None
        self._lease.release(clean=False)
        self._lane = SHARED_LANE
        self._lease = self._pool.acquire(pool_key(self._cfg, self._partition, SHARED_LANE))
        clients = self.clients
        clients.producer = None  # a kept one here is fenced by this open
        if clients.consumer is None:
            clients.consumer = consumer
        else:
            close_consumer(consumer)

    def _init(self, clients: Clients, fence_all: bool) -> str:
        """``init_transactions`` on this lane; with ``fence_all`` every other lane first."""
        assert clients.producer is not None  # noqa: S101 - created by the caller
        others = [t for t in lane_ids(self._cfg, [self._partition]) if t != self._txn_id]
        if fence_all:
            fence(self._cfg, others)
        return init_transactions(clients.producer, self._txn_id)

    def close(self, *, clean: bool, committed: bool) -> None:
        """Release the lease (the producer kept only if ``clean``); spares; preparations.

        A producer with an open transaction is released without an abort: the next
        ``init_transactions`` of its id aborts it. The task also reports this worker's
        finished preparations and, after a commit, starts the next ones (``_prepare``).
        """
        if self._lease is None:
            return
        ticket, task = self._ticket, self._task
        entry = self.clients
        entry.generation = ticket.generation if ticket else ""
        entry.serial = ticket.serial if ticket else 0
        self._lease.release(clean=clean)
        lane = self._pool.lanes.claim(self._cfg.sink_id, self._cfg.producer_lanes)
        parallelism = self._plan.parallelism
        gated = ticket is not None and ticket.gated
        fill_spares(self._pool, self._cfg, parallelism, {lane.index if gated else SHARED_LANE})
        if task is None or ticket is None:
            return
        report_prepared(self._pool, task, ticket)
        if may_prepare(steady=self._steady, committed=committed, claimed=lane.claimed):
            written = (self._partition, self._lane)
            prepare_lanes(self._pool, self._cfg, task, ticket, written, parallelism, lane)
