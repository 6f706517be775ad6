"""Unit tests of connectors.stage._shares: members' write tasks, the epoch's mode, the slot error.

The slot count is the one part that needs a SparkContext; here ``usable_slots`` is replaced
by a number (through Spark on local[2]: integration_tests/postgres/test_pg_with_kafka.py).
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from connectors.kafka import KafkaSink
from connectors.stage import CompositeSink, StageCode, StageError, StageOptions
from connectors.stage import _shares as shares
from connectors.stage._shares import Width, pinned, shape_epoch, split
from txn import CommitMode, CompositeResource, EpochHistory, EpochPlan, Guarantee
from txn._composite import Member

SHARED = None
FAKE_SC = object()  # stands for a SparkContext: only usable_slots reads it, replaced below


def widths(*tasks: int | None) -> list[Width]:
    return [
        Width(f"m{i}", t, "" if t is None else "its parallelism option")
        for i, t in enumerate(tasks)
    ]


@pytest.fixture
def slots(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Set the slot count ``usable_slots`` answers; records what it was asked."""

    class Slots:
        total = 2
        asked: list[int] = []

        def __call__(self, sc: Any, wanted: int) -> int:
            self.asked.append(wanted)
            return self.total

    fake = Slots()
    monkeypatch.setattr(shares, "usable_slots", fake)
    return fake


@pytest.mark.parametrize(
    ("budget", "tasks", "expected"),
    [
        (2, (SHARED, SHARED), [1, 1]),  # CompositeSink([kafka, pg]) on local[2]
        (3, (SHARED, SHARED), [2, 1]),  # the first member takes the remainder
        (8, (SHARED, SHARED, SHARED), [3, 3, 2]),
        (1, (SHARED, SHARED), [1, 1]),  # never below one task: the slot check decides
        (4, (2, SHARED), [2, 2]),  # an explicit member keeps its tasks
        (2, (2, SHARED), [2, 1]),
        (5, (1, 3), [1, 3]),  # nothing shared: the budget is not used
        (4, (SHARED,), [4]),  # a single sink takes the whole budget
    ],
)
def test_split(budget: int, tasks: tuple[int | None, ...], expected: list[int]) -> None:
    assert split(budget, widths(*tasks)) == expected


def test_default_parallelism_is_capped_by_the_slots_in_aligned_mode_only(slots: Any) -> None:
    slots.total = 1  # a one-core application: defaultParallelism still says 2
    aligned = StageOptions()
    assert shape_epoch(aligned, widths(SHARED), 2, FAKE_SC).widths == (1,)
    assert shape_epoch(aligned, widths(SHARED), 2, None).widths == (2,)  # no context to ask
    unaligned = StageOptions(mode="unaligned")
    assert shape_epoch(unaligned, widths(SHARED), 2, FAKE_SC).widths == (2,)
    slots.total = 8
    assert shape_epoch(aligned, widths(SHARED, SHARED), 2, FAKE_SC).widths == (1, 1)


def test_the_composites_parallelism_is_split_and_not_capped(slots: Any) -> None:
    slots.total = 8
    shape = shape_epoch(StageOptions(parallelism=5), widths(SHARED, 2, SHARED), 99, FAKE_SC)
    assert shape.widths == (2, 2, 1)
    slots.total = 4
    with pytest.raises(
        StageError,
        match="lower the composite's parallelism by 1",
        check=lambda e: e.code is StageCode.INSUFFICIENT_SLOTS,
    ):
        shape_epoch(StageOptions(parallelism=5), widths(SHARED, SHARED), 99, FAKE_SC).check()


def test_the_slot_error_names_the_member_to_change_and_by_how_much(slots: Any) -> None:
    slots.total = 2
    with pytest.raises(
        StageError, check=lambda e: e.code is StageCode.INSUFFICIENT_SLOTS
    ) as caught:
        shape_epoch(StageOptions(mode="aligned"), widths(2, SHARED), 2, FAKE_SC).check()
    text = str(caught.value)
    assert "all 3 write tasks" in text and "only 2 task slot(s)" in text
    assert "'m0' 2 (its parallelism option), 'm1' 1 (a share of the slots)" in text
    assert "lower 'm0''s parallelism by 1 (to 1)" in text
    slots.total = 3
    with pytest.raises(
        StageError, check=lambda e: e.code is StageCode.INSUFFICIENT_SLOTS
    ) as caught:
        shape_epoch(StageOptions(), widths(4, 3, SHARED), 3, FAKE_SC).check()
    text = str(caught.value)  # 8 tasks, 3 slots: the largest first, then the next
    assert "lower 'm0''s parallelism by 3 (to 1)" in text
    assert "lower 'm1''s parallelism by 2 (to 1)" in text
    assert "more task slot" not in text


def test_more_members_than_slots(slots: Any) -> None:
    slots.total = 1  # local[1]: two members cannot run aligned at all
    auto = shape_epoch(StageOptions(), widths(SHARED, SHARED), 1, FAKE_SC, auto_mode=True)
    assert auto.widths == (1, 1) and auto.options.mode is CommitMode.UNALIGNED
    assert not auto.options.aligned
    with pytest.raises(
        StageError,
        match="give the application 1 more task slot",
        check=lambda e: e.code is StageCode.INSUFFICIENT_SLOTS,
    ):
        shape_epoch(StageOptions(mode="aligned"), widths(SHARED, SHARED), 1, FAKE_SC).check()
    slots.total = 2  # two slots, three tasks: the explicit member has to change, not the mode
    with pytest.raises(
        StageError,
        match="lower 'm0''s parallelism by 1",
        check=lambda e: e.code is StageCode.INSUFFICIENT_SLOTS,
    ):
        shape_epoch(StageOptions(), widths(2, SHARED), 2, FAKE_SC, auto_mode=True).check()
    other = StageOptions(guarantee=Guarantee.AT_LEAST_ONCE)  # no barrier stage: no check
    assert shape_epoch(other, widths(SHARED, SHARED), 1, FAKE_SC).widths == (1, 1)


class _Res:
    """The part of a resource a composite's fingerprint reads."""

    completable_by_coordinator = False
    reads_markers = False

    def __init__(self, fingerprint: str) -> None:
        self._fingerprint = fingerprint

    def fingerprint(self) -> str:
        return self._fingerprint


def composite_fingerprint(split_: list[int]) -> str:
    members = [Member(_Res(f), w) for f, w in zip(("k", "p", "q"), split_, strict=False)]
    return CompositeResource(members).fingerprint()  # type: ignore[arg-type]


def test_an_epoch_in_doubt_keeps_its_split_and_mode(slots: Any) -> None:
    planned = [3, 1]  # on a 4-core application, unaligned: the default would now be 1 + 1
    plan = EpochPlan(
        sink_id="c",
        epoch=7,
        parallelism=4,
        fingerprint=composite_fingerprint(planned),
        mode=CommitMode.UNALIGNED,
    )
    history = EpochHistory.from_records([plan], sink_id="c")
    slots.total = 2
    shape = shape_epoch(
        StageOptions(),
        widths(SHARED, SHARED),
        2,
        FAKE_SC,
        history=history,
        fingerprint=composite_fingerprint,
        auto_mode=True,
    )
    assert shape.widths == (3, 1) and shape.options.mode is CommitMode.UNALIGNED
    assert shape.refusal is None
    aligned = EpochPlan(
        sink_id="c", epoch=7, parallelism=4, fingerprint=composite_fingerprint(planned)
    )
    with pytest.raises(
        StageError,
        match="keeps the split and mode",
        check=lambda e: e.code is StageCode.INSUFFICIENT_SLOTS,
    ):
        shape_epoch(  # planned aligned: it needs its 4 slots until it has committed
            StageOptions(),
            widths(SHARED, SHARED),
            2,
            FAKE_SC,
            history=EpochHistory.from_records([aligned], sink_id="c"),
            fingerprint=composite_fingerprint,
            auto_mode=True,
        ).check()


def test_pinned_split_search() -> None:
    for planned in ([1, 1], [2, 5], [6, 1]):
        plan = EpochPlan(
            sink_id="c",
            epoch=0,
            parallelism=sum(planned),
            fingerprint=composite_fingerprint(planned),
        )
        assert pinned(plan, [1, 1], widths(SHARED, SHARED), composite_fingerprint) == planned
    explicit = EpochPlan(
        sink_id="c", epoch=0, parallelism=5, fingerprint=composite_fingerprint([2, 2, 1])
    )
    assert pinned(explicit, [2, 1, 1], widths(2, SHARED, SHARED), composite_fingerprint) == [
        2,
        2,
        1,
    ]
    changed = EpochPlan(
        sink_id="c", epoch=0, parallelism=4, fingerprint=composite_fingerprint([2, 2])
    )  # the explicit one changed
    assert pinned(changed, [3, 1], widths(3, SHARED), composite_fingerprint) is None


def test_the_composites_mode_choice_survives_pickling() -> None:
    def member(name: str) -> KafkaSink:
        return KafkaSink("127.0.0.1:9", "out", name)  # no I/O at construction

    auto = CompositeSink([member("a-k"), member("a-j")], sink_id="a")
    given = CompositeSink([member("b-k"), member("b-j")], sink_id="b", mode="aligned")
    assert pickle.loads(pickle.dumps(auto))._auto_mode is True
    assert pickle.loads(pickle.dumps(given))._auto_mode is False
    for sink in (auto, given):
        sink.close()
