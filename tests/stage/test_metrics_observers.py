"""Unit tests: observers of a sink's epoch metrics (``MetricsBook.observe``) and the
listener's lag per topic."""

from __future__ import annotations

import logging
import threading

import pytest

from connectors.stage import EpochMetrics
from connectors.stage._listener import offsets_lag, topic_lags
from connectors.stage._metrics import MetricsBook


def epoch(batch_id: int) -> EpochMetrics:
    return EpochMetrics(
        sink_id="s",
        batch_id=batch_id,
        epoch=batch_id,
        query_id="q",
        guarantee="exactly_once",
        mode="aligned",
        skipped=False,
        committed=True,
    )


def test_an_observer_sees_the_kept_epochs_then_each_new_one_once_in_order() -> None:
    book = MetricsBook(keep=2)
    for b in range(3):
        book.add(epoch(b))
    seen: list[int] = []
    remove = book.observe(lambda m: seen.append(m.batch_id))
    assert seen == [1, 2]  # the kept ones (keep=2), oldest first
    book.add(epoch(3))
    assert seen == [1, 2, 3]
    remove()
    remove()  # removing twice is harmless
    book.add(epoch(4))
    assert seen == [1, 2, 3]


def test_a_failing_observer_is_logged_and_the_others_still_see_the_epoch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    book = MetricsBook()
    seen: list[int] = []

    def broken(m: EpochMetrics) -> None:
        raise RuntimeError("observer bug")

    book.observe(broken)
    book.observe(lambda m: seen.append(m.batch_id))
    with caplog.at_level(logging.WARNING, logger="connectors.stage.metrics"):
        book.add(epoch(0))
    assert seen == [0]
    assert [m.batch_id for m in book.recent()] == [0]
    assert "metrics observer" in caplog.text and "observer bug" in caplog.text


def test_epochs_added_while_an_observer_joins_reach_it_exactly_once() -> None:
    book = MetricsBook(keep=10_000)
    seen: list[int] = []
    adder = threading.Thread(target=lambda: [book.add(epoch(b)) for b in range(2000)])
    adder.start()
    book.observe(lambda m: seen.append(m.batch_id))
    adder.join()
    assert seen == list(range(2000))


def test_lag_per_topic_and_its_sum() -> None:
    latest = '{"orders":{"0":10,"1":7},"refunds":{"0":3}}'
    end = '{"orders":{"0":4,"1":7},"refunds":{}}'
    assert topic_lags(latest, end) == {"orders": 6, "refunds": 3}
    assert offsets_lag(latest, end) == 9
    # an end beyond latest (a partition that shrank in the report) counts as no lag
    assert topic_lags('{"t":{"0":1}}', '{"t":{"0":5}}') == {"t": 0}
    for other in ('{"a": 1}', "not json", None):
        assert topic_lags(other, end) is None
        assert offsets_lag(other, end) is None
