"""The exactly-once Kafka participant: one transactional producer per write partition.

The part it shares with the plain participant (states, lease, writer):
:class:`~connectors.kafka._sink._participant.KafkaParticipant`.
"""

from __future__ import annotations

import contextlib

from confluent_kafka import KafkaException, Producer, TopicPartition

from connectors.kafka._classify import call_with_retry, classify, to_write_error
from connectors.kafka._sink import _input_offsets, _pool_entries
from connectors.kafka._sink._lanes import SHARED_LANE
from connectors.kafka._sink._markers import encode_marker, marker_consumer, read_marker
from connectors.kafka._sink._participant import KafkaParticipant
from connectors.kafka._sink._prepare import prepare_lanes, report_prepared
from connectors.kafka._sink._producers import (
    fence,
    fill_spares,
    init_transactions,
    lane_ids,
    new_producer,
    pool_key,
)
from connectors.kafka._sink._writer import DeliveryErrors
from connectors.stage import ClientNote, ReuseDecision, TaskInfo
from connectors.stage._states import ParticipantState
from txn import ErrorAction, Marker, RowSummary

_S = ParticipantState

# Seconds for commit/abort/send_offsets of one transaction (each is retried too).
TXN_CALL_TIMEOUT_S = 60.0


class TransactionalKafkaParticipant(KafkaParticipant):
    """Exactly-once: one transactional producer of partition ``partition`` on this worker's lane.

    Opening: take this process's pooled clients of the lane's transactional id (a lease of
    ``_pool``; the lane: ``_lanes``) and ask the stage's
    :class:`~connectors.stage.ReuseTicket` whether the pooled producer may serve (it owns
    every rule); otherwise a spare or new producer runs ``init_transactions`` (fencing
    every older instance of the lane and aborting their open transaction; every other
    lane of the partition too when the ticket says ``fence_all``) and the marker is read
    after it. The task reports the instance that served it (``TaskInfo.note_client``). :meth:`close` releases the lease clean
    only when the transaction ended cleanly (state DONE).
    """

    _lane = SHARED_LANE
    _committed = False  # this task committed its transaction (``_prepare``: rule 1)

    def _pool_key(self) -> _pool_entries.Key:
        """Return the key of this worker's lane, or of the shared lane (see below).

        A worker writes on the shared lane (``SHARED_LANE``, no worker claims it) after an
        open that fenced every lane, and when it holds no lane; it keeps using that
        producer while the driver knows it serves the shared lane. In epochs whose commits
        no vote round gates (unaligned) a task uses its own lane only to reuse the known
        producer pooled there (rule 5 of ``ReuseTicket``), else the shared lane.
        """
        own = self._pool.lanes.claim(self._cfg.sink_id, self._cfg.producer_lanes).index
        task = self._task
        unaligned_redo = task is not None and not task.reuse.gated and not task.may_reuse
        self._lane = SHARED_LANE if task is None or unaligned_redo else own
        if self._lane != SHARED_LANE and task is not None:
            known = task.reuse.known_token
            mine = self._pool.token_of(pool_key(self._cfg, self._partition, own))
            shared = self._pool.token_of(pool_key(self._cfg, self._partition, SHARED_LANE))
            stale = mine is None or mine != known(task.partition, own)
            shared_known = shared is not None and shared == known(task.partition, SHARED_LANE)
            if stale and (not task.reuse.gated or shared_known):
                self._lane = SHARED_LANE
        return pool_key(self._cfg, self._partition, self._lane)

    @property
    def _txn_id(self) -> str:
        return self._cfg.transactional_id(self._partition, self._lane)

    def _open(self) -> str:
        clients = self._clients
        spare = None
        if clients.consumer is None:
            spare = self._lease.take_spare()
            clients.consumer = (
                spare.consumer
                if spare is not None and spare.consumer is not None
                else marker_consumer(self._cfg.cluster, self._cfg.marker_group(self._partition))
            )
        try:
            return self._reuse_or_init(spare)
        except BaseException:
            consumer, self._clients.consumer = self._clients.consumer, None
            if consumer is not None:
                with contextlib.suppress(KafkaException, RuntimeError):
                    consumer.close()
            raise

    def _decide(self, task: TaskInfo) -> ReuseDecision:
        """Ask the stage's ticket whether the pooled producer serves (it owns the rules)."""
        clients = self._clients
        consumer = clients.consumer
        assert consumer is not None  # noqa: S101 - set by the caller
        pooled = self._lease.pooled_producer
        return task.reuse.decide(
            task.task_attempt,
            task.partition,
            ClientNote(task.partition, self._lane, clients.token, False) if pooled else None,
            clients.generation if pooled else None,
            lambda: read_marker(consumer, self._cfg.marker_topic),
        )

    def _reuse_or_init(self, spare: _pool_entries.Spare | None) -> str:
        task = self._task
        fence_all = True
        if task is None:
            why = "no task binding (driver-side use)"
        else:
            decision = self._decide(task)
            if decision.reuse and self._lease.pooled_producer:
                self._reuse()
                self._marker = decision.marker
                self._states.move(_S.READY)
                task.note_client(self._lane, self._clients.token, fenced_all=False, reused=True)
                return decision.reason
            why, fence_all = decision.reason, decision.fence_all
        gated = task is not None and task.reuse.gated
        redo = task is None or not task.may_reuse
        # Rule 5: an unaligned epoch's fresh open writes on the shared lane, as every redo.
        if self._lane != SHARED_LANE and (not gated or (fence_all and redo)):
            self._move_to_shared_lane()
            spare = None  # made for the lane left
        clients = self._clients
        if spare is None:
            spare = self._lease.take_spare()
            if spare is not None and spare.consumer is not None:  # the pooled one serves
                with contextlib.suppress(KafkaException, RuntimeError):
                    spare.consumer.close()
        if spare is not None:
            clients.errors, clients.producer = spare.errors, spare.producer
            why += "; a spare producer, created earlier"
        else:
            clients.errors = DeliveryErrors()
            clients.producer = new_producer(self._cfg, self._txn_id, clients.errors)
        clients.token = self._init(clients.producer, fence_all)
        if task is not None:
            task.note_client(self._lane, clients.token, fenced_all=fence_all, reused=False)
        return f"{why}; every lane fenced" if fence_all else why

    def _move_to_shared_lane(self) -> None:
        """Write on the shared lane: redos (two then fence each other), unaligned fresh opens.

        (A first attempt of an aligned epoch that fences every lane stays on its own lane:
        a redo starts only after its vote round ended.)

        The marker consumer comes along; this worker's pooled producer of the lane left is
        dropped (the fence-all fences it anyway).
        """
        consumer = self._clients.consumer
        self._clients.consumer = None
        self._lease.release(clean=False)
        self._lane = SHARED_LANE
        self._lease = self._pool.acquire(pool_key(self._cfg, self._partition, SHARED_LANE))
        self._clients = self._lease.clients
        self._clients.producer = None  # a pooled one here is fenced by this open
        if self._clients.consumer is None:
            self._clients.consumer = consumer
        elif consumer is not None:
            with contextlib.suppress(KafkaException, RuntimeError):
                consumer.close()

    def _init(self, producer: Producer, fence_all: bool) -> str:
        """``init_transactions`` on this lane; with ``fence_all`` every other lane first."""
        others = [t for t in lane_ids(self._cfg, [self._partition]) if t != self._txn_id]
        if fence_all:
            fence(self._cfg, others)
        return init_transactions(producer, self._txn_id)

    def _read_marker(self) -> Marker | None:
        assert self._clients.consumer is not None  # noqa: S101 - kept from open to close
        return read_marker(self._clients.consumer, self._cfg.marker_topic)

    @property
    def _offsets_group(self) -> str | None:
        """The group this partition commits the epoch's input offsets to, if any."""
        if self._partition != _input_offsets.OFFSETS_PARTITION:
            return None
        return self._cfg.commit_offsets_to_group

    def _begin(self) -> None:
        group = self._cfg.commit_offsets_to_group
        if group is not None:  # every partition refuses, before anything is written
            _input_offsets.require_kafka_input(self._plan, self._cfg.sink_id, group)
        try:
            self._live().begin_transaction()
        except KafkaException as exc:
            raise to_write_error(exc, "begin_transaction") from exc

    def _put_marker(self, summary: RowSummary) -> None:
        assert self._clients.consumer is not None  # noqa: S101 - kept from open to close
        marker = Marker(self._plan.epoch, summary.rows, summary.checksum)
        offset, meta = encode_marker(marker)
        tp = TopicPartition(self._cfg.marker_topic, 0, offset, metadata=meta)
        group = self._clients.consumer.consumer_group_metadata()
        producer = self._live()
        call_with_retry(
            "send_offsets_to_transaction",
            lambda: producer.send_offsets_to_transaction([tp], group, TXN_CALL_TIMEOUT_S),
        )
        self._put_input_offsets()

    def _put_input_offsets(self) -> None:
        """Partition 0 with ``commit_offsets_to_group``: the epoch's input offsets, in its txn."""
        group = self._offsets_group
        if group is None:
            return
        offsets = _input_offsets.group_offsets(self._plan)
        metadata = _input_offsets.group_metadata(group)
        producer = self._live()
        call_with_retry(
            "send_offsets_to_transaction (input offsets)",
            lambda: producer.send_offsets_to_transaction(offsets, metadata, TXN_CALL_TIMEOUT_S),
        )

    def _commit(self) -> None:
        """Commit the transaction (retried while retriable; fenced raises)."""
        producer = self._live()
        try:
            call_with_retry(
                "commit_transaction", lambda: producer.commit_transaction(TXN_CALL_TIMEOUT_S)
            )
        except Exception as exc:
            if classify(exc) is ErrorAction.FATAL:
                self._drop()
            raise
        self._committed = True

    def _abort(self) -> None:
        """Abort the open transaction; a fenced or fatal producer is dropped instead."""
        producer = self._clients.producer
        if producer is None:
            return
        try:
            call_with_retry(
                "abort_transaction", lambda: producer.abort_transaction(TXN_CALL_TIMEOUT_S)
            )
        except Exception:
            # A fenced or fatal producer cannot abort; the broker (or the next
            # init_transactions of this id) aborts its transaction. Never continue.
            self._drop()
            raise

    def _drop(self) -> None:
        self._clients.producer = None
        self._states.fail(_S.DEAD)

    def close(self) -> None:
        """Release the lease (the producer kept only if clean) and top up the spares.

        A producer with an open transaction is released without an abort: the next
        ``init_transactions`` of its id aborts it. The task also reports this worker's
        finished preparations and, after a commit, starts the next ones (``_prepare``).
        """
        task = self._task
        self._clients.generation = task.reuse.generation if task else ""
        self._clients.serial = task.reuse.serial if task else 0
        self._lease.release(clean=self._clean())
        lane = self._pool.lanes.claim(self._cfg.sink_id, self._cfg.producer_lanes)
        gated = task is not None and task.reuse.gated
        parallelism = self._plan.parallelism
        fill_spares(self._pool, self._cfg, parallelism, {lane.index if gated else SHARED_LANE})
        if task is not None:
            report_prepared(self._pool, task)
            if self._committed:
                written = (self._partition, self._lane)
                prepare_lanes(self._pool, self._cfg, task, written, parallelism, lane)
