"""The offset bookkeeping of resume-from-output, as a property and by example.

Model: input partitions whose offsets hold records, transaction markers (no record) and
compacted-away records (no offset read), partitions added between batches, batches of any
size including empty ones. Epochs record their input through the real codec and history;
the last one may be left in doubt and settled aborted. Property: the records of the
committed epochs plus what a query started at ``starting_offsets`` reads are every record,
each once; the resumed query's first batch passes the check, one moved start does not.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.stage import StageCode, StageError, StageOptions
from connectors.stage._resume import (
    EARLIEST,
    check_resumed_batch,
    committed_point,
    resume_point,
    starting_offsets,
)
from txn import EpochCompletion, EpochHistory, EpochPlan, InputOffsets, TxnCode, TxnError
from txn._codec import decode_record, encode_record

SINK = "resume-sink"
RECORD, MARKER, COMPACTED = "record", "marker", "compacted"

kinds = st.sampled_from([RECORD, RECORD, RECORD, MARKER, COMPACTED])


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[dict[tuple[str, int], list[str]], list[dict], bool]:
    """Partitions' offset kinds, the epochs' end positions, whether the last is in doubt."""
    width = draw(st.integers(1, 3))
    logs = {("a", p): draw(st.lists(kinds, max_size=12)) for p in range(width)}
    logs[("b", 0)] = draw(st.lists(kinds, max_size=12))
    n = draw(st.integers(1, 5))
    added = ("a", width)  # a partition added to topic a before epoch added_at (n: never)
    added_at = draw(st.integers(0, n))
    if added_at < n:
        logs[added] = draw(st.lists(kinds, max_size=12))
    ends: list[dict] = []
    current = {tp: 0 for tp in logs if tp != added}
    for epoch in range(n):
        if epoch == added_at:
            current[added] = 0
        # each partition moves to a position in [current, end]: 0 steps is an empty batch
        current = {tp: draw(st.integers(o, len(logs[tp]))) for tp, o in current.items()}
        ends.append(dict(current))
    return logs, ends, draw(st.booleans())


def _records(logs: dict, tp: tuple[str, int], start: int, end: int) -> set[tuple[str, int, int]]:
    return {(tp[0], tp[1], o) for o in range(start, end) if logs[tp][o] == RECORD}


def _history(ends: list[dict], in_doubt: bool) -> EpochHistory:
    records: list[object] = []
    start: dict = {}
    for epoch, end in enumerate(ends):
        offsets = InputOffsets.of(start, end)
        plan = EpochPlan(sink_id=SINK, epoch=epoch, parallelism=2, fingerprint="fp", input=offsets)
        records.append(decode_record(encode_record(plan)))  # through the codec
        last = epoch == len(ends) - 1
        if not (last and in_doubt):
            records.append(EpochCompletion(SINK, epoch, committed=True))
        start = end
    if in_doubt:  # settled: nothing of it visible (txn._settle.settle_in_doubt)
        records.append(EpochCompletion(SINK, len(ends) - 1, committed=False))
    return EpochHistory.from_records(records, sink_id=SINK)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_committed_records_and_the_resumed_query_cover_every_record_once(
    scenario: tuple[dict, list[dict], bool],
) -> None:
    logs, ends, in_doubt = scenario
    history = _history(ends, in_doubt)
    written: list[tuple[str, int, int]] = []
    start: dict = {}
    committed = len(ends) - 1 if in_doubt else len(ends)
    for end in ends[:committed]:
        for tp, e in end.items():
            written += _records(logs, tp, start.get(tp, 0), e)
        start = end
    counts: dict[str, int] = {}
    for topic, partition in logs:
        counts[topic] = max(counts.get(topic, 0), partition + 1)
    if committed == 0 and not in_doubt:
        return
    point = resume_point(history)
    begin = starting_offsets(point, counts)
    resolved = {
        (t, int(p)): (0 if o == EARLIEST else o) for t, ps in begin.items() for p, o in ps.items()
    }
    assert set(resolved) == set(logs)  # every partition named, as Spark wants
    rest = [r for tp, o in resolved.items() for r in _records(logs, tp, o, len(logs[tp]))]
    every = [r for tp in logs for r in _records(logs, tp, 0, len(logs[tp]))]
    assert sorted(written + rest) == sorted(every)  # nothing lost, nothing twice

    first = InputOffsets.of(resolved, {tp: len(logs[tp]) for tp in logs})
    check_resumed_batch(point, first)
    known = [tp for tp, o in point.as_map().items() if o != EARLIEST]
    if not known:
        return
    moved = known[0]
    wrong = InputOffsets.of({**resolved, moved: resolved[moved] + 1}, first.end_map())
    with pytest.raises(
        StageError,
        match=f"{moved[0]}-{moved[1]} starts at",
        check=lambda e: e.code is StageCode.RESUME_INPUT_MISMATCH,
    ):
        check_resumed_batch(point, wrong)


def _one(end: dict, other: int = 0) -> EpochHistory:
    plan = EpochPlan(
        sink_id=SINK,
        epoch=0,
        parallelism=1,
        fingerprint="fp",
        input=InputOffsets.of({}, end, other),
    )
    return EpochHistory.from_records([plan, EpochCompletion(SINK, 0, committed=True)], sink_id=SINK)


def test_topics_or_partitions_that_differ_are_named() -> None:
    point = resume_point(_one({("a", 0): 5, ("a", 1): 7}))
    with pytest.raises(
        StageError,
        match=r"not read now: \['a'\]; new: \['c'\]",
        check=lambda e: e.code is StageCode.RESUME_INPUT_MISMATCH,
    ):
        check_resumed_batch(point, InputOffsets.of({("c", 0): 5}, {("c", 0): 9}))
    with pytest.raises(
        StageError,
        match="a-1 is not read",
        check=lambda e: e.code is StageCode.RESUME_INPUT_MISMATCH,
    ):
        check_resumed_batch(point, InputOffsets.of({("a", 0): 5}, {("a", 0): 9}))
    with pytest.raises(
        StageError,
        match="partitions a-1 of the output's input are gone",
        check=lambda e: e.code is StageCode.RESUME_INPUT_MISMATCH,
    ):
        starting_offsets(point, {"a": 1})
    assert starting_offsets(point, {"a": 3}) == {"a": {"0": 5, "1": 7, "2": EARLIEST}}
    assert starting_offsets(point) == {"a": {"0": 5, "1": 7}}


def test_input_that_was_not_kafka_is_refused() -> None:
    with pytest.raises(
        StageError, match="1 streaming source", check=lambda e: e.code is StageCode.NOT_KAFKA_INPUT
    ):
        resume_point(_one({("a", 0): 5}, other=1))
    bare = EpochHistory.from_records(
        [
            EpochPlan(sink_id=SINK, epoch=0, parallelism=1, fingerprint="fp"),
            EpochCompletion(SINK, 0, committed=True),
        ],
        sink_id=SINK,
    )
    with pytest.raises(
        StageError,
        match="recorded no input offsets",
        check=lambda e: e.code is StageCode.NOT_KAFKA_INPUT,
    ):
        resume_point(bare)
    point = resume_point(_one({("a", 0): 5}))
    with pytest.raises(
        StageError, match="could not be read", check=lambda e: e.code is StageCode.NOT_KAFKA_INPUT
    ):
        check_resumed_batch(point, None)


def test_an_epoch_in_doubt_must_be_settled_first() -> None:
    history = _one({("a", 0): 5}).with_record(
        EpochPlan(
            sink_id=SINK,
            epoch=1,
            parallelism=1,
            fingerprint="fp",
            input=InputOffsets.of({("a", 0): 5}, {("a", 0): 8}),
        )
    )
    with pytest.raises(
        TxnError, match="epoch 1 .* is in doubt", check=lambda e: e.code is TxnCode.EPOCH_UNRESOLVED
    ):
        resume_point(history)
    assert committed_point(history).as_map() == {("a", 0): 5}  # eos offsets: read-only


def test_resume_option_is_validated() -> None:
    assert StageOptions(resume="from-output").resume == "from-output"
    with pytest.raises(
        TxnError, match="resume must be None or one of", check=lambda e: e.code is TxnCode.CONFIG
    ):
        StageOptions(resume="latest")
    with pytest.raises(
        TxnError, match="exclude each other", check=lambda e: e.code is TxnCode.CONFIG
    ):
        StageOptions(resume="from-output", start_over=True)
