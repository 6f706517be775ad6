"""The exactly-once Kafka participant: one transactional producer per write partition.

The part it shares with the plain participant (states, clients, writer):
:class:`~connectors.kafka._sink._participant.KafkaParticipant`.
"""

from __future__ import annotations

from confluent_kafka import KafkaException, Producer, TopicPartition

from connectors.kafka._client import call_bounded, call_with_retry, classify, to_write_error
from connectors.kafka._sink import _input_offsets
from connectors.kafka._sink._markers import encode_marker, read_marker
from connectors.kafka._sink._participant import KafkaParticipant
from connectors.stage._states import ParticipantState
from txn import ErrorAction, Marker, RowSummary

_S = ParticipantState

# Seconds for commit/abort/send_offsets of one transaction (each is retried too).
TXN_CALL_TIMEOUT_S = 60.0


def send_offsets(
    producer: Producer, offsets: list[TopicPartition], group: object, what: str
) -> None:
    """Add ``offsets`` of ``group`` to the producer's transaction (retried while retriable).

    Each attempt is bounded by ``call_bounded``: librdkafka (2.x) can block this call far
    past its timeout, when the producer holds a stale Unknown-topic verdict on the offsets'
    topic after a broker restart (issue 38) or when the broker it cached as the group
    coordinator stopped (librdkafka #5511, #5456). Such an attempt raises a
    ``KafkaConnectorError`` of action FATAL: the producer is dropped, never called again, and the epoch is
    retried with a new instance of its transactional id, whose ``init_transactions``
    fences the old one.
    """

    def attempt() -> None:
        producer.send_offsets_to_transaction(offsets, group, TXN_CALL_TIMEOUT_S)

    call_with_retry(what, lambda: call_bounded(what, attempt, TXN_CALL_TIMEOUT_S))


class TransactionalKafkaParticipant(KafkaParticipant):
    """Exactly-once: one transactional producer of write partition ``partition``.

    Its producer comes from the sink's producer strategy (``_strategy``), initialized
    (``init_transactions`` fenced every older instance of its transactional id and aborted
    their open transaction) or kept from an earlier task, whose marker the strategy read
    while deciding that it may serve; else the marker is read now, after the fencing.
    """

    _committed = False  # this task committed its transaction (``_reuse.may_prepare``)

    def _open(self) -> str:
        why = self._producers.open()
        if self._producers.reused:
            self._marker = self._producers.marker
            self._states.move(_S.READY)
        return why

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
        self._send_offsets([tp], group, "send_offsets_to_transaction")
        self._put_input_offsets()

    def _send_offsets(self, offsets: list[TopicPartition], group: object, what: str) -> None:
        """``send_offsets``; a producer it gave up (or fenced, fatal) is dropped."""
        try:
            send_offsets(self._live(), offsets, group, what)
        except Exception as exc:
            if classify(exc) is ErrorAction.FATAL:
                self._drop()
            raise

    def _put_input_offsets(self) -> None:
        """Partition 0 with ``commit_offsets_to_group``: the epoch's input offsets, in its txn."""
        group = self._offsets_group
        if group is None:
            return
        offsets = _input_offsets.group_offsets(self._plan)
        metadata = _input_offsets.group_metadata(group)
        self._send_offsets(offsets, metadata, "send_offsets_to_transaction (input offsets)")

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
        """Hand the clients back to the strategy: clean or not, committed or not.

        A producer with an open transaction is dropped without an abort: the next
        ``init_transactions`` of its id aborts it.
        """
        self._producers.close(clean=self._clean(), committed=self._committed)
