"""Query bindings in the epoch log: which query's batches are which epochs."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from txn import (
    EpochCompletion,
    EpochHistory,
    EpochPlan,
    FileEpochLog,
    QueryBinding,
    TxnCode,
    TxnError,
)
from txn._codec import decode_record, encode_record

SINK = "sink-b"


def committed(epoch: int) -> list[object]:
    return [
        EpochPlan(sink_id=SINK, epoch=epoch, parallelism=2, fingerprint="fp"),
        EpochCompletion(SINK, epoch, committed=True),
    ]


def history(*records: object) -> EpochHistory:
    return EpochHistory.from_records(records, sink_id=SINK)  # type: ignore[arg-type]


def test_binding_round_trips_through_the_codec_and_pickle() -> None:
    binding = QueryBinding(SINK, "q-1", 7)
    assert decode_record(encode_record(binding)) == binding
    assert pickle.loads(pickle.dumps(binding)) == binding


def test_first_binding_adopts_the_logs_epochs() -> None:
    h = history(*committed(0), *committed(1), QueryBinding(SINK, "q-1", 0))
    assert h.binding == QueryBinding(SINK, "q-1", 0)
    assert h.epoch_of(2) == 2


def test_new_query_starts_above_every_epoch() -> None:
    h = history(*committed(0), *committed(1), QueryBinding(SINK, "q-1", 0))
    with pytest.raises(
        TxnError, match="start above epoch 1", check=lambda e: e.code is TxnCode.ILLEGAL_TRANSITION
    ):
        h.with_record(QueryBinding(SINK, "q-2", 1))
    moved = h.with_record(QueryBinding(SINK, "q-2", 2))
    assert moved.epoch_of(0) == 2 and moved.binding is not None
    assert [r for r in moved.records if isinstance(r, QueryBinding)] == [moved.binding]


def test_no_new_query_while_an_epoch_is_in_doubt() -> None:
    h = history(
        *committed(0),
        QueryBinding(SINK, "q-1", 0),
        EpochPlan(sink_id=SINK, epoch=1, parallelism=2, fingerprint="fp"),
    )
    with pytest.raises(
        TxnError,
        match="epoch 1 is not committed",
        check=lambda e: e.code is TxnCode.ILLEGAL_TRANSITION,
    ):
        h.with_record(QueryBinding(SINK, "q-2", 2))


def test_open_binding_is_filled_in_with_the_same_offset() -> None:
    h = history(*committed(0), QueryBinding(SINK, "", 1))
    assert h.with_record(QueryBinding(SINK, "q-9", 1)).binding == QueryBinding(SINK, "q-9", 1)
    with pytest.raises(
        TxnError,
        match="keeps the reset's epoch offset",
        check=lambda e: e.code is TxnCode.ILLEGAL_TRANSITION,
    ):
        h.with_record(QueryBinding(SINK, "q-9", 5))


def test_file_log_keeps_the_binding_through_compaction(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with FileEpochLog(path, sink_id=SINK, retain_epochs=1) as log:
        log.append(QueryBinding(SINK, "q-1", 0))
        for epoch in range(5):
            for record in committed(epoch):
                log.append(record)  # type: ignore[arg-type]
    with FileEpochLog(path, sink_id=SINK) as log:
        loaded = log.load()
    assert loaded.binding == QueryBinding(SINK, "q-1", 0)
    assert loaded.committed_through is not None and 0 not in loaded.epochs()


def test_read_only_log_reads_while_a_coordinator_holds_it(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with FileEpochLog(path, sink_id=SINK) as owner:
        for record in committed(0):
            owner.append(record)  # type: ignore[arg-type]
        reader = FileEpochLog(path, sink_id=SINK, read_only=True)
        assert reader.load().is_committed(0)
        with pytest.raises(
            TxnError, match="read-only", check=lambda e: e.code is TxnCode.EPOCH_LOG
        ):
            reader.append(EpochPlan(sink_id=SINK, epoch=1, parallelism=1, fingerprint="fp"))
        for record in committed(1):
            owner.append(record)  # type: ignore[arg-type]  # the owner was not fenced
        assert reader.load().is_committed(1)
