"""Producer ids and the transaction coordinator (KIP-98, KIP-360, KIP-447), single node.

Transaction protocol as implemented (numbers match the client's call order):
1. InitProducerId(tid): validate the timeout; a new id gets (pid, epoch 0); a known id
   gets its epoch bumped, which fences older instances. If a transaction of that id is
   open, it is first aborted with a bumped epoch (markers carry it) and the request is
   answered CONCURRENT_TRANSACTIONS, as Kafka does; the client retries and the retry
   bumps the epoch once more. A producer that passes its own id and epoch (KIP-360)
   and already got the current epoch is answered with it again, without a bump.
2. AddPartitionsToTxn / AddOffsetsToTxn: state becomes Ongoing, the partitions and
   groups are remembered; the transaction's timeout clock starts with the first add.
3. Produce (partition logs) and TxnOffsetCommit (offset store, kept pending).
4. EndTxn(commit|abort): state PrepareCommit/PrepareAbort is journaled, markers are
   written to every partition, pending offsets are applied or dropped, then state
   CompleteCommit/CompleteAbort is journaled. A crash in between is finished by
   :meth:`TransactionCoordinator.recover` at the next start.
5. A transaction open longer than its timeout is aborted by :meth:`expire`, which
   bumps the epoch first so the producer is fenced, as Kafka does.

The coordinator receives what it uses (config, journal, topics, offsets, clock and a
callback that wakes waiting fetches), not the whole broker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from ._clock import Clock
from ._config import BrokerConfig
from ._errors import KafkaProtocolError
from ._journal import Entry, Journal
from ._offsets import OffsetStore
from ._topics import TopicRegistry

log = logging.getLogger("minikafka.txn")
FIRST_PRODUCER_ID = 1000
NO_EPOCH = -1
MAX_EPOCH = 32767
# Kafka rotates to a new producer id once an epoch reaches Short.MaxValue - 1.
EXHAUSTED_EPOCH = MAX_EPOCH - 1
EMPTY, ONGOING = "Empty", "Ongoing"
PREPARE_COMMIT, PREPARE_ABORT = "PrepareCommit", "PrepareAbort"
COMPLETE_COMMIT, COMPLETE_ABORT = "CompleteCommit", "CompleteAbort"

# Request versions from which PRODUCER_FENCED replaces INVALID_PRODUCER_EPOCH (KIP-588).
FENCED_SINCE = {"init": 4, "add_partitions": 2, "add_offsets": 2, "end": 2, "txn_offsets": 3}


def fenced_code(api: str, version: int) -> ErrorCode:
    """PRODUCER_FENCED for versions that know it, else INVALID_PRODUCER_EPOCH."""
    if version >= FENCED_SINCE[api]:
        return ErrorCode.producer_fenced
    return ErrorCode.invalid_producer_epoch


@dataclass(kw_only=True)
class TxnMeta:
    """Coordinator state of one transactional id."""

    tid: str
    producer_id: int
    epoch: int
    timeout_ms: int
    state: str = EMPTY
    last_epoch: int = NO_EPOCH
    partitions: set[tuple[str, int]] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    start_ms: int = 0
    last_producer_id: int = -1

    def to_entry(self) -> Entry:
        """Journal form."""
        return {
            "t": "txn",
            "tid": self.tid,
            "pid": self.producer_id,
            "epoch": self.epoch,
            "last": self.last_epoch,
            "timeout": self.timeout_ms,
            "state": self.state,
            "parts": sorted([t, p] for t, p in self.partitions),
            "groups": sorted(self.groups),
            "start": self.start_ms,
            "lpid": self.last_producer_id,
        }

    @classmethod
    def from_entry(cls, entry: Entry) -> TxnMeta:
        """Inverse of :meth:`to_entry`."""
        return cls(
            tid=entry["tid"],
            producer_id=entry["pid"],
            epoch=entry["epoch"],
            timeout_ms=entry["timeout"],
            state=entry["state"],
            last_epoch=entry["last"],
            partitions={(t, p) for t, p in entry["parts"]},
            groups=set(entry["groups"]),
            start_ms=entry["start"],
            last_producer_id=entry.get("lpid", -1),
        )


class TransactionCoordinator:
    """Allocates producer ids and runs transactions for every transactional id."""

    def __init__(
        self,
        config: BrokerConfig,
        journal: Journal,
        topics: TopicRegistry,
        offsets: OffsetStore,
        clock: Clock,
        notify: Callable[[], None],
    ) -> None:
        self._config = config
        self._journal = journal
        self._topics = topics
        self._offsets = offsets
        self._clock = clock
        self._notify = notify
        self.txns: dict[str, TxnMeta] = {}
        self.next_pid = FIRST_PRODUCER_ID

    # ---- persistence -------------------------------------------------------------
    def apply(self, entry: Entry) -> bool:
        """Apply a replayed journal entry; False if it is not ours."""
        if entry["t"] == "pid":
            self.next_pid = max(self.next_pid, entry["next"])
        elif entry["t"] == "txn":
            meta = TxnMeta.from_entry(entry)
            self.txns[meta.tid] = meta
            self.next_pid = max(self.next_pid, meta.producer_id + 1)
        else:
            return False
        return True

    def snapshot(self) -> list[Entry]:
        """Journal entries recreating the coordinator state."""
        return [{"t": "pid", "next": self.next_pid}] + [m.to_entry() for m in self.txns.values()]

    def recover(self) -> None:
        """Finish transactions that were between prepare and complete at a crash."""
        for meta in self.txns.values():
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                log.info("recovering transaction %s in state %s", meta.tid, meta.state)
                self._complete(meta, meta.state == PREPARE_COMMIT, recovering=True)

    def _persist(self, meta: TxnMeta) -> None:
        self._journal.append(meta.to_entry())

    def _new_pid(self) -> int:
        pid = self.next_pid
        self.next_pid += 1
        self._journal.append({"t": "pid", "next": self.next_pid})
        return pid

    # ---- InitProducerId ----------------------------------------------------------
    def init_producer_id(
        self, tid: str | None, timeout_ms: int, pid: int, epoch: int, version: int
    ) -> tuple[ErrorCode, int, int]:
        """InitProducerId; returns (error, producer id, epoch). See step 1 of the module doc."""
        if tid is None:
            return ErrorCode.none, self._new_pid(), 0
        if not tid:
            return ErrorCode.invalid_request, -1, -1
        if timeout_ms <= 0 or timeout_ms > self._config.transaction_max_timeout_ms:
            return ErrorCode.invalid_transaction_timeout, -1, -1
        meta = self.txns.get(tid)
        if meta is None:
            meta = TxnMeta(
                tid=tid, producer_id=self._new_pid(), epoch=NO_EPOCH, timeout_ms=timeout_ms
            )
            self.txns[tid] = meta
        expected = (pid, epoch) if pid >= 0 else None
        if expected is not None and not self._known_producer(meta, *expected):
            return fenced_code("init", version), -1, -1
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return ErrorCode.concurrent_transactions, -1, -1
        if meta.state == ONGOING:
            log.info("InitProducerId(%s) fences and aborts the open transaction", tid)
            self._fence(meta)
            self._complete(meta, commit=False)
            return ErrorCode.concurrent_transactions, -1, -1
        err = self._next_epoch(meta, expected)
        if err != ErrorCode.none:
            return fenced_code("init", version), -1, -1
        meta.timeout_ms = timeout_ms
        self._persist(meta)
        return ErrorCode.none, meta.producer_id, meta.epoch

    @staticmethod
    def _known_producer(meta: TxnMeta, pid: int, epoch: int) -> bool:
        """Whether a producer passing (pid, epoch) may ask for the id's next epoch (KIP-360)."""
        return (
            meta.epoch == NO_EPOCH
            or pid == meta.producer_id
            or (pid == meta.last_producer_id and epoch >= EXHAUSTED_EPOCH)
        )

    def _next_epoch(self, meta: TxnMeta, expected: tuple[int, int] | None) -> ErrorCode:
        """Bump the epoch (or rotate the producer id) of an id with no open transaction."""
        if meta.epoch >= EXHAUSTED_EPOCH and (expected is None or expected[1] == meta.epoch):
            meta.last_producer_id, meta.producer_id = meta.producer_id, self._new_pid()
            meta.epoch, meta.last_epoch = 0, NO_EPOCH
            return ErrorCode.none
        if expected is None or expected[1] in (NO_EPOCH, meta.epoch):
            meta.last_epoch, meta.epoch = meta.epoch, meta.epoch + 1
            return ErrorCode.none
        if meta.last_epoch != NO_EPOCH and expected[1] == meta.last_epoch:
            return ErrorCode.none  # a retry of a bump the producer did not see answered
        return ErrorCode.invalid_producer_epoch

    def _fence(self, meta: TxnMeta) -> None:
        """Bump the epoch of an open transaction before the coordinator aborts it."""
        if meta.epoch < MAX_EPOCH:
            meta.last_epoch, meta.epoch = meta.epoch, meta.epoch + 1

    # ---- transaction requests ----------------------------------------------------
    def _check(
        self, tid: str, pid: int, epoch: int, api: str, version: int
    ) -> tuple[ErrorCode, TxnMeta | None]:
        meta = self.txns.get(tid)
        if meta is None or meta.producer_id != pid:
            return ErrorCode.invalid_producer_id_mapping, None
        if epoch != meta.epoch:
            return fenced_code(api, version), None
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return ErrorCode.concurrent_transactions, None
        return ErrorCode.none, meta

    def _begin(self, meta: TxnMeta) -> None:
        if meta.state != ONGOING:
            meta.state = ONGOING
            meta.start_ms = self._clock.wall_ms()
            meta.partitions.clear()
            meta.groups.clear()

    def add_partitions(
        self, tid: str, pid: int, epoch: int, parts: list[tuple[str, int]], version: int
    ) -> dict[tuple[str, int], ErrorCode]:
        """AddPartitionsToTxn; error per partition (unknown partitions are checked first)."""
        unknown = {tp for tp in parts if self._topics.partition(*tp) is None}
        if unknown:
            return {
                tp: ErrorCode.unknown_topic_or_partition
                if tp in unknown
                else ErrorCode.operation_not_attempted
                for tp in parts
            }
        err, meta = self._check(tid, pid, epoch, "add_partitions", version)
        if meta is None:
            return dict.fromkeys(parts, err)
        self._begin(meta)
        meta.partitions.update(parts)
        self._persist(meta)
        return dict.fromkeys(parts, ErrorCode.none)

    def add_offsets(self, tid: str, pid: int, epoch: int, group: str, version: int) -> ErrorCode:
        """AddOffsetsToTxn."""
        err, meta = self._check(tid, pid, epoch, "add_offsets", version)
        if meta is None:
            return err
        self._begin(meta)
        meta.groups.add(group)
        self._persist(meta)
        return ErrorCode.none

    def check_offsets_commit(
        self, tid: str, pid: int, epoch: int, group: str, version: int
    ) -> ErrorCode:
        """Validate a TxnOffsetCommit against the producer's transaction."""
        err, meta = self._check(tid, pid, epoch, "txn_offsets", version)
        if meta is None:
            return err
        if meta.state != ONGOING or group not in meta.groups:
            return ErrorCode.invalid_txn_state
        return ErrorCode.none

    def end_txn(self, tid: str, pid: int, epoch: int, commit: bool, version: int) -> ErrorCode:
        """EndTxn: write markers and complete (or report why not)."""
        err, meta = self._check(tid, pid, epoch, "end", version)
        if meta is None:
            return err
        if meta.state == ONGOING:
            self._complete(meta, commit)
            return ErrorCode.none
        if (meta.state == COMPLETE_COMMIT and commit) or (
            meta.state == COMPLETE_ABORT and not commit
        ):
            return ErrorCode.none  # a retried EndTxn
        return ErrorCode.invalid_txn_state

    def expire(self) -> None:
        """Abort transactions open longer than their timeout, fencing the producer."""
        now = self._clock.wall_ms()
        for meta in list(self.txns.values()):
            if meta.state == ONGOING and now - meta.start_ms > meta.timeout_ms:
                log.info(
                    "transaction %s timed out after %d ms: aborting with epoch %d",
                    meta.tid,
                    meta.timeout_ms,
                    meta.epoch + 1,
                )
                self._fence(meta)
                self._complete(meta, commit=False)

    def verify_produce(self, tid: str, pid: int, epoch: int, topic: str, partition: int) -> None:
        """Reject a transactional batch that is not part of an open transaction.

        Like Kafka's transaction verification (KIP-890 part 1), this stops a late
        batch of a finished or fenced transaction from opening a hanging one.

        Raises:
            KafkaProtocolError: INVALID_PRODUCER_ID_MAPPING, INVALID_PRODUCER_EPOCH
                or INVALID_TXN_STATE.

        """
        meta = self.txns.get(tid)
        if meta is None or meta.producer_id != pid:
            raise KafkaProtocolError(
                ErrorCode.invalid_producer_id_mapping, f"{tid!r} does not own producer id {pid}"
            )
        if epoch != meta.epoch:
            raise KafkaProtocolError(
                ErrorCode.invalid_producer_epoch, f"epoch {epoch} != current {meta.epoch}"
            )
        if meta.state != ONGOING or (topic, partition) not in meta.partitions:
            raise KafkaProtocolError(
                ErrorCode.invalid_txn_state,
                f"{topic}-{partition} is not part of an open transaction of {tid!r}",
            )

    def _complete(self, meta: TxnMeta, commit: bool, *, recovering: bool = False) -> None:
        meta.state = PREPARE_COMMIT if commit else PREPARE_ABORT
        self._persist(meta)
        now = self._clock.wall_ms()
        for topic, index in sorted(meta.partitions):
            plog = self._topics.partition(topic, index)
            if plog is None or (recovering and not plog.has_open_txn(meta.producer_id)):
                continue
            plog.append_marker(meta.producer_id, meta.epoch, commit, now)
        for group in sorted(meta.groups):
            self._offsets.complete(group, meta.producer_id, commit)
        meta.state = COMPLETE_COMMIT if commit else COMPLETE_ABORT
        meta.partitions.clear()
        meta.groups.clear()
        self._persist(meta)
        self._notify()
