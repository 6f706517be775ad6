"""The epoch state machine, the record legality rules and the record codec."""

from __future__ import annotations

import json

import pytest

from txn import (
    CommitMode,
    EpochCompletion,
    EpochHistory,
    EpochPlan,
    EpochState,
    Guarantee,
    LogRecord,
    TxnCode,
    TxnError,
)
from txn._codec import decode_record, encode_record
from txn._history import check_next_record
from txn._model import EpochDecision

S = EpochState
SINK = "s"
LEGAL = {
    (S.NEW, S.PLANNED),
    (S.PLANNED, S.PLANNED),
    (S.PLANNED, S.COMMIT_DECIDED),
    (S.PLANNED, S.ABORT_DECIDED),
    (S.PLANNED, S.COMMITTED),
    (S.PLANNED, S.ABORTED),
    (S.COMMIT_DECIDED, S.COMMITTED),
    (S.COMMIT_DECIDED, S.COMMIT_DECIDED),  # a redo plan keeps the commit decision
    (S.ABORT_DECIDED, S.ABORTED),
    (S.ABORTED, S.PLANNED),
}


@pytest.mark.parametrize("src", list(S), ids=lambda s: s.value)
@pytest.mark.parametrize("dst", list(S), ids=lambda s: s.value)
def test_transition_table(src: EpochState, dst: EpochState) -> None:
    if (src, dst) in LEGAL:
        assert src.transition(dst) is dst
    else:
        with pytest.raises(
            TxnError,
            match=f"{src.value} -> {dst.value}",
            check=lambda e: e.code is TxnCode.ILLEGAL_TRANSITION,
        ):
            src.transition(dst, epoch=4)


def test_state_flags() -> None:
    assert [s for s in S if s.in_doubt] == [S.PLANNED, S.COMMIT_DECIDED, S.ABORT_DECIDED]
    assert [s for s in S if s.is_final] == [S.COMMITTED]


def plan(epoch: int, parallelism: int = 2, attempt: int = 0, fp: str = "fp") -> EpochPlan:
    return EpochPlan(
        sink_id=SINK, epoch=epoch, parallelism=parallelism, fingerprint=fp, attempt=attempt
    )


def _history(*records: LogRecord) -> EpochHistory:
    return EpochHistory.from_records(records, sink_id=SINK)


def test_history_folds_retries() -> None:
    h = _history(
        plan(0),
        EpochDecision(sink_id=SINK, epoch=0, commit=False),
        EpochCompletion(SINK, 0, committed=False),
        plan(0, parallelism=4, attempt=1),
        plan(0, parallelism=4, attempt=2),
    )
    assert h.state(0) is S.PLANNED and h.decision(0) is None
    p = h.plan(0)
    assert p is not None and p.attempt == 2 and p.parallelism == 4
    assert h.in_doubt() == [p] and h.unfinished() == [0]
    assert h.state(7) is S.NEW and not h.is_committed(7) and h.last_committed_epoch() is None


@pytest.mark.parametrize(
    ("records", "bad", "match"),
    [
        ((), EpochDecision(sink_id=SINK, epoch=0, commit=True), "no plan"),
        ((), plan(0, attempt=1), "attempt 0"),
        ((), plan(0, parallelism=0), "parallelism must be >= 1"),
        ((plan(0),), plan(1), "epoch 0 is not committed"),
        ((plan(0), EpochCompletion(SINK, 0, committed=True)), plan(0, attempt=1), "committed"),
        ((plan(3), EpochCompletion(SINK, 3, committed=True)), plan(2), "epochs must increase"),
        ((plan(0),), plan(0, parallelism=3, attempt=1), "original parallelism"),
        ((plan(0),), plan(0, fp="other", attempt=1), "original parallelism"),
        ((plan(0),), plan(0, attempt=2), "attempt 1"),
        (
            (plan(0), EpochDecision(sink_id=SINK, epoch=0, commit=True)),
            EpochDecision(sink_id=SINK, epoch=0, commit=False),
            "needs state planned",
        ),
        (
            (plan(0), EpochDecision(sink_id=SINK, epoch=0, commit=True)),
            EpochCompletion(SINK, 0, committed=False),
            "commit-decided -> aborted",
        ),
        (
            (plan(0), EpochDecision(sink_id=SINK, epoch=0, commit=False)),
            EpochCompletion(SINK, 0, committed=True),
            "abort-decided -> committed",
        ),
        ((), EpochCompletion("other", 0, committed=True), "belongs to sink"),
    ],
)
def test_illegal_records(records: tuple[LogRecord, ...], bad: LogRecord, match: str) -> None:
    history = _history(*records)
    with pytest.raises(TxnError, match=match, check=lambda e: e.code is TxnCode.ILLEGAL_TRANSITION):
        check_next_record(history, bad)


def test_aborted_epoch_may_be_replanned_freely() -> None:
    h = _history(plan(0), EpochCompletion(SINK, 0, committed=False))
    assert check_next_record(h, plan(0, parallelism=9, fp="new", attempt=1)) is S.PLANNED


RECORDS: list[LogRecord] = [
    EpochPlan(
        sink_id="sink é",
        epoch=12,
        parallelism=3,
        fingerprint="f",
        guarantee=Guarantee.AT_MOST_ONCE,
        mode=CommitMode.UNALIGNED,
        attempt=4,
    ),
    EpochDecision(sink_id="sink", epoch=12, commit=True, reason='p1: "x"\n'),
    EpochCompletion("sink", 12, committed=False),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_codec_round_trip(record: LogRecord) -> None:
    data = encode_record(record)
    assert b"\n" not in data
    assert decode_record(data) == record
    assert decode_record(data + b"\n") == record


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_codec_detects_any_flipped_bit(record: LogRecord) -> None:
    data = encode_record(record)
    for i in range(len(data)):
        for bit in (0x01, 0x20):
            damaged = bytearray(data)
            damaged[i] ^= bit
            try:
                decoded = decode_record(bytes(damaged), source="topic t/0@5")
            except TxnError as exc:
                assert exc.code is TxnCode.EPOCH_LOG_CORRUPT and "topic t/0@5" in str(exc)
            else:  # a flip that leaves equivalent JSON (e.g. whitespace) must decode the same
                assert decoded == record


def _sealed(body: dict[str, object]) -> bytes:
    from txn._codec import seal

    return seal(body)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ({"type": "plan", "v": 1}, "fields"),
        ({"type": "nope", "v": 1}, "unknown record type"),
        ({"type": "completion", "v": 9}, "version"),
        (
            {"type": "completion", "v": 1, "sink_id": "s", "epoch": "1", "committed": True},
            "want int",
        ),
        (
            {"type": "completion", "v": 1, "sink_id": "s", "epoch": True, "committed": True},
            "want int",
        ),
        (
            {
                "type": "plan",
                "v": 1,
                "sink_id": "s",
                "epoch": 1,
                "parallelism": 1,
                "fingerprint": "f",
                "guarantee": "twice",
                "mode": "aligned",
                "attempt": 0,
            },
            "bad enum",
        ),
    ],
)
def test_codec_rejects_well_sealed_but_invalid_bodies(body: dict[str, object], match: str) -> None:
    with pytest.raises(TxnError, match=match, check=lambda e: e.code is TxnCode.EPOCH_LOG_CORRUPT):
        decode_record(_sealed(body))


def test_codec_rejects_non_json_and_missing_checksum() -> None:
    with pytest.raises(
        TxnError, match="not valid JSON", check=lambda e: e.code is TxnCode.EPOCH_LOG_CORRUPT
    ):
        decode_record(b"\xff{")
    with pytest.raises(
        TxnError,
        match="checksum field missing",
        check=lambda e: e.code is TxnCode.EPOCH_LOG_CORRUPT,
    ):
        decode_record(json.dumps({"type": "plan"}).encode())


def test_enum_parsing() -> None:
    assert Guarantee.parse("at-least-once") is Guarantee.AT_LEAST_ONCE
    assert CommitMode.parse(CommitMode.UNALIGNED) is CommitMode.UNALIGNED
    with pytest.raises(
        TxnError,
        match="exactly-once, at-least-once, at-most-once",
        check=lambda e: e.code is TxnCode.CONFIG,
    ):
        Guarantee.parse("exactly_once")
