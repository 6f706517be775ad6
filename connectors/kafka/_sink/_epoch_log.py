"""``KafkaEpochLog``: the sink's epoch log in a compacted Kafka topic.

Needs nothing but the cluster's address (and the settings every client of the sink shares,
``client_config``). Layout: one partition of ``topic``
(``cleanup.policy=compact``), shared by any number of sinks; every message key
starts with ``{sink_id}/``:

* ``{sink_id}/r/{epoch:020d}/{attempt:06d}/{plan|decision|completion}``: one record,
  encoded with :func:`txn._codec.encode_record` (checksummed);
* ``{sink_id}/binding``: the latest :class:`txn.QueryBinding` (compaction keeps one);
* ``{sink_id}/floor``: JSON ``{"committed_through": n, "parallelism_floor": p}`` left by
  compaction when old committed epochs are tombstoned away.

Protocol:

1. reading (``load`` before this instance owns the log) folds every message of the
   sink in offset order, keeping the latest value per key (what compaction keeps) and
   dropping tombstoned keys; only committed messages are read (``read_committed``);
2. the first ``append`` acquires the log: a transactional producer with
   ``transactional.id = {sink_id}.coordinator`` runs ``init_transactions``, which
   FENCES any other coordinator of the same sink and aborts its open append, then
   re-reads the log;
3. each ``append`` validates the record against the folded history, then writes it
   (plus tombstones and a new floor when old epochs are compacted) in one Kafka
   transaction; it returns once the transaction committed (durable);
4. a fenced coordinator gets :class:`TxnCode.EPOCH_LOG_LOCKED` and must stop.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaError, Message, Producer, TopicPartition

from connectors.kafka import _client
from connectors.kafka._client import (
    PARTITION_EOF,
    ClientConfig,
    StateTopicDurability,
    admin_client,
    broker_restart,
    call_with_retry,
    classify,
    cluster_of,
    ensure_topics,
    kafka_error_of,
    raise_if_denied,
    retry_over_restart,
    stale_topic_verdict,
    with_delivery_cause,
)
from connectors.kafka._errors import KafkaConnectorError
from txn import (
    EpochHistory,
    EpochLog,
    EpochPlan,
    ErrorAction,
    LogRecord,
    QueryBinding,
    TxnCode,
    TxnError,
    has_code,
)
from txn._codec import decode_record, encode_record
from txn._log import DEFAULT_RETAIN_EPOCHS

# Seconds to read the whole log topic before giving up (it is compacted, so small).
# The cases an append passes through as they are; any other failure is the log's.
_LOG_CODES = (
    TxnCode.EPOCH_LOG,
    TxnCode.EPOCH_LOG_CORRUPT,
    TxnCode.EPOCH_LOG_LOCKED,
    TxnCode.ILLEGAL_TRANSITION,
)
LOAD_TIMEOUT_S = 60.0
# Seconds one poll() waits for the next message while reading the log.
CONSUME_POLL_S = 1.0
# Milliseconds the broker may hold an empty fetch of the log reader (the end of the
# log is only seen through an empty fetch, so this bounds every load).
READER_FETCH_WAIT_MS = 20
# Seconds for init_transactions / commit_transaction of the coordinator's producer.
LOG_TXN_TIMEOUT_S = 30.0
# Transaction timeout of the log producer: appends are tiny and fast.
LOG_TXN_TIMEOUT_MS = 60_000


def _kind(record: LogRecord) -> str:
    return type(record).__name__.removeprefix("Epoch").lower()


class KafkaEpochLog(EpochLog):
    """Epoch log of sink ``sink_id`` in the compacted topic ``topic`` (see module doc).

    ``client_config``: the librdkafka settings the sink's clients share (its
    ``client_config`` option: security, ``client.id``, ...); validated here (no network
    I/O), :class:`KafkaCode.CLIENT_CONFIG` names a bad one. ``durability``: the replication
    and ``min.insync.replicas`` the topic is created with if missing (default: the kit's,
    :class:`~connectors.kafka._client.StateTopicDurability`).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        sink_id: str,
        *,
        topic: str = _client.DEFAULT_EPOCH_LOG_TOPIC,
        retain_epochs: int = DEFAULT_RETAIN_EPOCHS,
        create_topic: bool = True,
        client_config: ClientConfig = None,
        durability: StateTopicDurability | None = None,
    ) -> None:
        self._cluster = cluster_of(bootstrap_servers, client_config)
        self._sink_id = sink_id
        self._topic = topic
        self._retain = retain_epochs
        self._create_topic = create_topic
        self._durability = durability or StateTopicDurability()
        self._producer: Producer | None = None
        self._history: EpochHistory | None = None
        self._attempts: dict[int, int] = {}
        self._closed = False
        self._contacted = False

    @property
    def sink_id(self) -> str:
        """The sink this log belongs to."""
        return self._sink_id

    @property
    def topic(self) -> str:
        """The compacted log topic."""
        return self._topic

    # -- reading -----------------------------------------------------------------------
    def load(self) -> EpochHistory:
        """Return the folded history (cached once this instance owns the log)."""
        self._check_open()
        if self._producer is not None and self._history is not None:
            return self._history
        return self._read()

    def _read(self) -> EpochHistory:
        if not self._contacted:  # a wrong address or credentials fail fast, typed
            admin_client(self._cluster)
            self._contacted = True
        if self._create_topic:
            ensure_topics(
                self._cluster,
                [self._topic],
                partitions=1,
                compacted=True,
                durability=self._durability,
            )
        values = self._read_messages()
        floor: dict[str, Any] = {}
        records: list[LogRecord] = []
        for key, (offset, value) in sorted(values.items(), key=lambda kv: kv[1][0]):
            source = f"{self._topic}[0]@{offset} key {key}"
            if key == f"{self._sink_id}/floor":
                floor = json.loads(value)
            else:
                records.append(decode_record(value, source=source))
        history = EpochHistory.from_records(
            records,
            sink_id=self._sink_id,
            committed_through=floor.get("committed_through"),
            parallelism_floor=int(floor.get("parallelism_floor", 0)),
        )
        self._attempts = {r.epoch: r.attempt for r in records if isinstance(r, EpochPlan)}
        return history

    def _read_messages(self) -> dict[str, tuple[int, bytes]]:
        """Latest value per key of this sink (tombstoned keys removed), with its offset."""
        consumer = _client.consumer(
            self._cluster,
            {
                "group.id": f"{self._sink_id}.epoch-log-reader.{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed",
                "enable.auto.commit": "false",
                "enable.partition.eof": "true",
                # Reaching the end needs an empty fetch: do not let the broker hold it long.
                "fetch.wait.max.ms": str(READER_FETCH_WAIT_MS),
                # Reading starts at offset 0 (below): if the log no longer starts there
                # (records deleted), the consumer resets to the log start, never the end.
                "auto.offset.reset": "earliest",
            },
        )
        out: dict[str, tuple[int, bytes]] = {}
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        try:
            # Offset 0, not OFFSET_BEGINNING: librdkafka resolves "beginning" with a
            # ListOffsets it sends about 0.5 s after the assignment (measured: 500 ms per
            # read against 10-100 ms; benchmarks/HISTORY.md, section 6).
            consumer.assign([TopicPartition(self._topic, 0, 0)])
            while time.monotonic() < deadline:
                m = consumer.poll(CONSUME_POLL_S)  # returns as soon as one message is there
                if m is not None and self._take(m, out):
                    return out
        finally:
            consumer.close()
        msg = f"reading epoch log topic {self._topic} took over {LOAD_TIMEOUT_S}s; check the broker"
        raise TxnError(msg, code=TxnCode.EPOCH_LOG)

    def _take(self, m: Message, out: dict[str, tuple[int, bytes]]) -> bool:
        """Fold one consumed message into ``out``; True at the end of the partition."""
        err = m.error()
        if err is not None:
            if err.code() == PARTITION_EOF:
                return True
            if broker_restart(err):  # also a topic the restarted broker has not loaded yet
                return False
            raise_if_denied(err, f"reading epoch log topic {self._topic}")
            msg = f"reading epoch log topic {self._topic} failed: {err}"
            raise TxnError(msg, code=TxnCode.EPOCH_LOG)
        raw_key = m.key()
        key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key)
        if key.startswith(f"{self._sink_id}/"):
            value = m.value()
            if value is None:
                out.pop(key, None)
            else:
                out[key] = (m.offset() or 0, bytes(value))
        return False

    # -- writing -----------------------------------------------------------------------
    def _acquire(self) -> Producer:
        """Return the log's producer: a new one (taking the log over) if it has none.

        The history is read again only if it was dropped too (the producer lost track of
        the log); a producer replaced for a stale topic verdict keeps it (``_write``).
        """
        if self._producer is not None:
            return self._producer
        producer = self._new_producer()
        if self._history is None:
            self._history = self._read()
        self._producer = producer
        return producer

    def _new_producer(self) -> Producer:
        """Return a new producer of the log's transactional id, its transactions initialized."""
        producer = _client.producer(
            self._cluster,
            {
                "transactional.id": _client.coordinator_id(self._sink_id),
                "transaction.timeout.ms": str(LOG_TXN_TIMEOUT_MS),
                "enable.idempotence": "true",
                "acks": "all",
                "linger.ms": "0",
            },
        )
        try:
            call_with_retry(
                "epoch log init_transactions", lambda: producer.init_transactions(LOG_TXN_TIMEOUT_S)
            )
        except Exception as exc:
            raise_if_denied(exc, f"taking over epoch log {self._topic}")
            if broker_restart(exc):
                raise  # the append's retries ride it out (``retry_over_restart``)
            msg = f"cannot take over epoch log {self._topic} for sink {self._sink_id!r}: {exc}"
            raise TxnError(msg, code=TxnCode.EPOCH_LOG) from exc
        return producer

    def _key(self, record: LogRecord, attempt: int) -> str:
        if isinstance(record, QueryBinding):
            return f"{self._sink_id}/binding"
        return f"{self._sink_id}/r/{record.epoch:020d}/{attempt:06d}/{_kind(record)}"

    def append(self, record: LogRecord) -> None:
        """Validate ``record`` and append it durably in one Kafka transaction (:meth:`append_all`)."""
        self.append_all((record,))

    def append_all(self, records: Sequence[LogRecord]) -> None:
        """Validate ``records`` and append them durably in one Kafka transaction.

        Rides through a broker restart: a transaction that failed with a broker-restart
        error (the topic unknown while the broker reloads it, no leader, the coordinator
        loading, the connection down, the producer state lost) was not committed; it is
        aborted and written again for up to ``BROKER_RESTART_WAIT_S``
        (``_classify.retry_over_restart``). When the abort itself fails, the producer is
        dropped and the next attempt takes the log over again (``init_transactions``,
        re-read) before it validates and writes the records again. A failure that may be
        the producer's stale Unknown-topic verdict (``stale_topic_verdict``: the broker
        has the topic again, a new producer sees it at once) gets a new producer, without
        reading the log again. A record the history refuses raises :class:`txn.TxnCode.ILLEGAL_TRANSITION` as every epoch log does (nothing
        is written).
        """
        self._check_open()
        if not records:
            return
        try:
            retry_over_restart(
                f"appending to epoch log {self._topic}", lambda: self._append_once(records)
            )
        except Exception as exc:
            if has_code(exc, *_LOG_CODES):
                raise
            msg = f"appending to epoch log {self._topic} failed: {exc}; the record is not durable"
            raise TxnError(msg, code=TxnCode.EPOCH_LOG) from exc

    def _append_once(self, records: Sequence[LogRecord]) -> None:
        producer = self._acquire()
        assert self._history is not None  # noqa: S101 - set by _acquire
        folded = self._history
        attempts = dict(self._attempts)
        messages: list[tuple[str, bytes | None]] = []
        for record in records:
            folded = folded.with_record(record)
            if isinstance(record, EpochPlan):
                attempts[record.epoch] = record.attempt
            messages.append(
                (self._key(record, attempts.get(record.epoch, 0)), encode_record(record))
            )
        compacted = folded.compacted(self._retain)
        if compacted is not folded:
            messages += self._tombstones(folded, compacted, attempts)
        self._write(producer, messages)
        self._history = compacted
        self._attempts = {e: a for e, a in attempts.items() if compacted.entry(e) is not None}

    def _tombstones(
        self, folded: EpochHistory, compacted: EpochHistory, attempts: dict[int, int]
    ) -> list[tuple[str, bytes | None]]:
        kept = {id(r) for r in compacted.records}
        current: dict[int, int] = {}
        out: list[tuple[str, bytes | None]] = []
        for r in folded.records:
            if isinstance(r, QueryBinding):
                continue  # one key, overwritten in place: a tombstone would delete the latest
            if isinstance(r, EpochPlan):
                current[r.epoch] = r.attempt
            if id(r) not in kept:
                out.append((self._key(r, current.get(r.epoch, attempts.get(r.epoch, 0))), None))
        floor = {
            "committed_through": compacted.committed_through,
            "parallelism_floor": compacted.parallelism_floor,
        }
        out.append((f"{self._sink_id}/floor", json.dumps(floor).encode()))
        return out

    def _write(self, producer: Producer, messages: list[tuple[str, bytes | None]]) -> None:
        """Write ``messages`` in one transaction; on failure abort it and raise (classified)."""
        failed: list[KafkaError] = []  # delivery errors of this transaction's records

        def delivered(err: KafkaError | None, _msg: object) -> None:
            if err is not None:
                failed.append(err)

        try:
            producer.begin_transaction()
            for key, value in messages:
                producer.produce(self._topic, value, key, on_delivery=delivered)
            producer.flush(LOG_TXN_TIMEOUT_S)  # serves the delivery reports
            call_with_retry(
                "epoch log commit", lambda: producer.commit_transaction(LOG_TXN_TIMEOUT_S)
            )
        except Exception as exc:
            cause = with_delivery_cause(exc, failed)
            self._abort(producer, exc)
            if stale_topic_verdict(cause):
                # The topic may be there again while this producer still refuses it: the
                # next attempt writes with a new instance (issue 38); the history stands.
                self._producer = None
            raise cause from exc

    def _abort(self, producer: Producer, exc: Exception) -> None:
        """Abort the failed transaction (fenced: raise typed; abort failed: drop the producer)."""
        if classify(exc) is ErrorAction.FATAL:
            self._producer = None
            self._history = None
            raise_if_denied(exc, f"appending to epoch log {self._topic}")
            msg = (
                f"epoch log of sink {self._sink_id!r} was taken over by another coordinator "
                f"(fenced: {kafka_error_of(exc) or exc}); only one driver may run this sink: "
                "stop this one"
            )
            raise KafkaConnectorError(msg, code=TxnCode.EPOCH_LOG_LOCKED) from exc
        try:
            call_with_retry(
                "epoch log abort", lambda: producer.abort_transaction(LOG_TXN_TIMEOUT_S)
            )
        except Exception:  # noqa: BLE001 - the append's own error is what counts
            # Seen after a broker restart (the coordinator lost the open transaction):
            # take the log over again (and re-read it) before the next attempt.
            self._producer = None
            self._history = None

    def close(self) -> None:
        """Release the producer. Idempotent."""
        self._closed = True
        self._producer = None

    def _check_open(self) -> None:
        if self._closed:
            msg = f"epoch log {self._topic} of sink {self._sink_id!r} is closed"
            raise TxnError(msg, code=TxnCode.EPOCH_LOG)
