"""The reference producer strategy under Spark: exactly once, one new producer per write task.

The pooled strategy is what every other file here runs (the default); its reuse is
counted in ``test_ksink_it_pool.py`` and ``test_ksink_it_prepared_spark.py``. The crash
matrix and the chaos tests run both (``test_ksink_it_crash_matrix.py``, ``integration_tests/e2e``).
"""

from __future__ import annotations

import pytest

from connectors.kafka import KafkaSink
from integration_tests.kafka_sink._support import (
    expected,
    lso_reaches_high_watermark,
    read_committed,
    rows,
    sid,
    values,
)

pytestmark = pytest.mark.spark

ROWS = 30


@pytest.mark.parametrize("mode", ["aligned", "unaligned"])
def test_the_reference_strategy_writes_exactly_once_with_a_new_producer_per_task(
    spark, kafka_bootstrap, new_topic, closing, mode
):
    topic = new_topic("strategy", 2)
    sink = closing(
        KafkaSink(
            kafka_bootstrap,
            topic,
            sid(),
            mode=mode,
            parallelism=2,
            producer_strategy="reference",
            create_topics=True,
        )
    )
    for epoch in range(3):
        assert sink(rows(spark, ROWS, start=ROWS * epoch), epoch).committed
    replay = sink(rows(spark, ROWS, start=ROWS * 2), 2)  # the last batch again: skipped
    assert replay.skipped
    assert [m.clients_new for m in sink.metrics() if not m.skipped] == [2, 2, 2]
    assert values(read_committed(kafka_bootstrap, topic)) == expected(3 * ROWS)
    assert lso_reaches_high_watermark(kafka_bootstrap, topic)
