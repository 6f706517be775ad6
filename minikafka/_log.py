"""Partition log: stored record batches, producer state, LSO and aborted-transaction index.

A :class:`PartitionLog` keeps every batch of one partition as raw bytes in a single
``bytearray`` (plus a file when persistent), with parallel lists of base offsets and
byte positions so a fetch is one ``bisect`` and one slice. Per producer it keeps the
state Kafka's ProducerStateManager keeps: epoch, the last five batches' sequence
ranges (for duplicate detection), and the first offset of an open transaction.

Contract:
1. ``append`` validates every batch of a request first (CRC is checked by the
   caller), then assigns offsets and stores them; it is all-or-nothing per request.
2. The high watermark equals the log end offset (single replica).
3. The last stable offset (LSO) is the smallest first offset of an open transaction,
   else the high watermark.
4. Reloading a file rebuilds all of the above by scanning batch headers; a torn
   tail (partial last batch, CRC mismatch) is truncated.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import crc32c
from kio.schema.errors import ErrorCode

from ._errors import KafkaProtocolError
from ._records import (
    CONTROL_COMMIT,
    BatchHeader,
    build_control_batch,
    control_type,
    parse_header,
    record_timestamps,
    with_base_offset,
)

log = logging.getLogger("minikafka.log")
# Kafka keeps the metadata of this many recent batches per producer for dedup.
PRODUCER_BATCH_CACHE = 5
INT32_MAX = 2**31 - 1


@dataclass(slots=True)
class ProducerEntry:
    """Per-partition state of one producer id."""

    epoch: int
    # (first_seq, last_seq, base_offset, last_offset) of the most recent batches
    batches: deque[tuple[int, int, int, int]] = field(
        default_factory=lambda: deque(maxlen=PRODUCER_BATCH_CACHE)
    )
    txn_first_offset: int | None = None

    @property
    def last_seq(self) -> int:
        """Last sequence number appended, -1 when none."""
        return self.batches[-1][1] if self.batches else -1


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction in this partition (first data offset, marker offset)."""

    producer_id: int
    first_offset: int
    last_offset: int


class PartitionLog:
    """All batches of one topic partition, in memory and optionally in a file."""

    def __init__(self, topic: str, partition: int, path: Path | None, fsync: str) -> None:
        self.topic = topic
        self.partition = partition
        self.path = path
        self._fsync = fsync
        self.buf = bytearray()
        self.bases: list[int] = []
        self.positions: list[int] = []
        self.max_ts: list[int] = []
        self.log_start = 0
        self.leo = 0
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of open txn
        self.aborted: list[AbortedTxn] = []
        self._aborted_last: list[int] = []
        self._file: BinaryIO | None = None
        if path is not None:
            self._load(path)
            self._file = open(path, "ab", buffering=0)  # noqa: SIM115 - kept open

    # ---- reading -----------------------------------------------------------------
    @property
    def high_watermark(self) -> int:
        """Offset after the last stored record."""
        return self.leo

    @property
    def lso(self) -> int:
        """Last stable offset: first offset of the oldest open transaction, else HW."""
        return min(self.ongoing.values(), default=self.leo)

    def read(self, offset: int, max_bytes: int, upper: int) -> bytes:
        """Batches from the one holding ``offset`` up to ``max_bytes`` below ``upper``.

        At least one whole batch is returned when any is available (KIP-74), so a
        batch larger than ``max_bytes`` still makes progress.
        """
        if offset >= upper or not self.bases:
            return b""
        i = bisect.bisect_right(self.bases, offset) - 1
        i = max(i, 0)
        j = bisect.bisect_left(self.bases, upper)  # batches with base < upper
        if j <= i:
            return b""
        start = self.positions[i]
        limit = start + max(max_bytes, 0)
        e = bisect.bisect_right(self.positions, limit, i + 1, j)
        last = e - 1
        if self._batch_end(last) > limit:
            last -= 1
        end_pos = self._batch_end(max(last, i))
        return bytes(memoryview(self.buf)[start:end_pos])

    def _batch_end(self, idx: int) -> int:
        return self.positions[idx + 1] if idx + 1 < len(self.positions) else len(self.buf)

    def aborted_in_range(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping offsets [start, end)."""
        i = bisect.bisect_left(self._aborted_last, start)
        return [a for a in self.aborted[i:] if a.first_offset < end]

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with the largest timestamp."""
        best: tuple[int, int] | None = None
        for idx, mts in enumerate(self.max_ts):
            if best is not None and mts <= best[1]:
                continue
            raw = self._batch_bytes(idx)
            hdr = parse_header(raw)
            if hdr.is_control:
                continue
            records = record_timestamps(raw, hdr) or [
                (hdr.base_offset + hdr.last_offset_delta, mts)
            ]
            top = max(ts for _, ts in records)
            best = next((off, ts) for off, ts in records if ts == top)
        return best

    def _batch_bytes(self, idx: int) -> bytes:
        return bytes(self.buf[self.positions[idx] : self._batch_end(idx)])

    def offset_for_timestamp(self, ts: int) -> tuple[int, int] | None:
        """First (offset, timestamp) with timestamp >= ts, None if none."""
        for idx, mts in enumerate(self.max_ts):
            if mts >= ts:
                pos = self.positions[idx]
                end = self.positions[idx + 1] if idx + 1 < len(self.positions) else len(self.buf)
                raw = bytes(self.buf[pos:end])
                hdr = parse_header(raw)
                if hdr.is_control:
                    continue
                for off, rts in record_timestamps(raw, hdr) or [(hdr.base_offset, mts)]:
                    if rts >= ts:
                        return off, rts
        return None

    # ---- writing -----------------------------------------------------------------
    def append(self, batches: list[tuple[BatchHeader, bytes]]) -> int:
        """Append a produce request's batches; return the base offset of the first.

        A duplicate batch (same producer, epoch and sequence range as one of the
        last five) is not stored again; its original base offset is returned.

        Raises:
            KafkaProtocolError: INVALID_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE_NUMBER,
                UNKNOWN_PRODUCER_ID or INVALID_RECORD.

        """
        for hdr, _raw in batches:
            if hdr.is_control:
                raise KafkaProtocolError(
                    ErrorCode.invalid_record, "clients may not produce control batches"
                )
        if len(batches) == 1:
            dup = self._check_producer(batches[0][0])
            if dup is not None:
                return dup
        else:
            for hdr, _raw in batches:
                if self._check_producer(hdr) is not None:
                    raise KafkaProtocolError(
                        ErrorCode.duplicate_sequence_number, "duplicate in multi-batch request"
                    )
        first = self.leo
        chunks = []
        for hdr, raw in batches:
            base = self.leo
            stored = with_base_offset(raw, base)
            self._index(hdr, base, stored)
            self._track_producer(hdr, base)
            chunks.append(stored)
        if self._file is not None:
            self._file.write(b"".join(chunks))
            if self._fsync == "always":
                os.fsync(self._file.fileno())
        return first

    def append_marker(self, producer_id: int, epoch: int, commit: bool, now_ms: int) -> int:
        """Write a commit/abort control batch for ``producer_id``; return its offset."""
        base = self.leo
        raw = build_control_batch(
            base_offset=base,
            producer_id=producer_id,
            producer_epoch=epoch,
            commit=commit,
            timestamp_ms=now_ms,
        )
        hdr = parse_header(raw)
        self._index(hdr, base, raw)
        self._apply_marker(producer_id, epoch, commit, base)
        if self._file is not None:
            self._file.write(raw)
            if self._fsync != "never":
                os.fsync(self._file.fileno())
        return base

    def has_open_txn(self, producer_id: int) -> bool:
        """Whether ``producer_id`` has an open transaction in this partition."""
        return producer_id in self.ongoing

    def close(self) -> None:
        """Close the backing file (the in-memory state stays readable)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def delete(self) -> None:
        """Close and remove the backing file."""
        self.close()
        if self.path is not None:
            self.path.unlink(missing_ok=True)

    # ---- internals ---------------------------------------------------------------
    def _index(self, hdr: BatchHeader, base: int, stored: bytes) -> None:
        self.bases.append(base)
        self.positions.append(len(self.buf))
        self.max_ts.append(hdr.max_timestamp)
        self.buf += stored
        self.leo = base + hdr.last_offset_delta + 1

    def _check_producer(self, hdr: BatchHeader) -> int | None:
        """Validate sequence/epoch; return the original base offset for a duplicate."""
        pid = hdr.producer_id
        if pid < 0:
            return None
        entry = self.producers.get(pid)
        if entry is None:
            if hdr.base_sequence not in (0, -1):
                raise KafkaProtocolError(
                    ErrorCode.unknown_producer_id,
                    f"producer {pid} unknown to {self.topic}-{self.partition}, "
                    f"sequence {hdr.base_sequence} != 0",
                )
            return None
        if hdr.producer_epoch < entry.epoch:
            raise KafkaProtocolError(
                ErrorCode.invalid_producer_epoch,
                f"producer {pid} epoch {hdr.producer_epoch} < current {entry.epoch}",
            )
        if hdr.base_sequence < 0:
            return None
        if hdr.producer_epoch > entry.epoch:
            if hdr.base_sequence != 0:
                raise KafkaProtocolError(
                    ErrorCode.out_of_order_sequence_number,
                    f"new epoch {hdr.producer_epoch} of producer {pid} must start at sequence 0",
                )
            return None
        for first_seq, last_seq, base, _last in entry.batches:
            if first_seq == hdr.base_sequence and last_seq == hdr.last_sequence:
                return base
        expected = (entry.last_seq + 1) % (INT32_MAX + 1) if entry.batches else 0
        if hdr.base_sequence != expected:
            raise KafkaProtocolError(
                ErrorCode.out_of_order_sequence_number,
                f"producer {pid} sequence {hdr.base_sequence}, expected {expected}",
            )
        return None

    def _track_producer(self, hdr: BatchHeader, base: int) -> None:
        pid = hdr.producer_id
        if pid < 0:
            return
        entry = self.producers.get(pid)
        if entry is None or hdr.producer_epoch > entry.epoch:
            old_txn = entry.txn_first_offset if entry is not None else None
            entry = ProducerEntry(epoch=hdr.producer_epoch, txn_first_offset=old_txn)
            self.producers[pid] = entry
        if hdr.base_sequence >= 0:
            last = base + hdr.last_offset_delta
            entry.batches.append((hdr.base_sequence, hdr.last_sequence, base, last))
        if hdr.is_transactional and pid not in self.ongoing:
            self.ongoing[pid] = base
            entry.txn_first_offset = base

    def _apply_marker(self, pid: int, epoch: int, commit: bool, offset: int) -> None:
        entry = self.producers.get(pid)
        if entry is None:
            entry = ProducerEntry(epoch=epoch)
            self.producers[pid] = entry
        elif epoch > entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        first = self.ongoing.pop(pid, None)
        entry.txn_first_offset = None
        if first is not None and not commit:
            self.aborted.append(AbortedTxn(pid, first, offset))
            self._aborted_last.append(offset)

    def _load(self, path: Path) -> None:
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
            return
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            try:
                hdr = parse_header(data, pos)
            except KafkaProtocolError as exc:
                if exc.error_code is not ErrorCode.corrupt_message:
                    raise
                break
            end = pos + hdr.length
            if end > len(data):
                break
            raw = data[pos:end]
            if int.from_bytes(raw[17:21], "big") != crc32c.crc32c(raw[21:]):
                break
            self._index(hdr, hdr.base_offset, raw)
            if hdr.is_control:
                ctype = control_type(raw)
                self._apply_marker(
                    hdr.producer_id, hdr.producer_epoch, ctype == CONTROL_COMMIT, hdr.base_offset
                )
            else:
                self._track_producer(hdr, hdr.base_offset)
            pos = end
        if pos < len(data):
            log.warning(
                "truncating torn tail of %s at byte %d (%d bytes dropped)",
                path,
                pos,
                len(data) - pos,
            )
            with open(path, "r+b") as fh:
                fh.truncate(pos)
