"""failOnDataLoss against offsets removed by DeleteRecords (start < earliest)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from ._support import CLIENT_TIMEOUT_S, batch_read, offsets, produce_plain, values

pytestmark = pytest.mark.spark


def delete_before(admin: AdminClient, topic: str, offset: int) -> None:
    """Move the log start offset of partition 0 to ``offset`` (DeleteRecords)."""
    futures = admin.delete_records(
        [TopicPartition(topic, 0, offset)], request_timeout=CLIENT_TIMEOUT_S
    )
    try:
        next(iter(futures.values())).result(CLIENT_TIMEOUT_S)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError._UNSUPPORTED_FEATURE:
            pytest.skip("the broker does not support DeleteRecords (API key 21), needed here")
        raise


def test_deleted_offsets_follow_fail_on_data_loss(
    rc_spark: Any, kafka_bootstrap: str, kafka_admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("rc-loss")
    produce_plain(kafka_bootstrap, topic, [f"v{i}" for i in range(10)])
    delete_before(kafka_admin, topic, 5)
    assert offsets(kafka_admin, topic)[0] == 5
    start = json.dumps({topic: {"0": 2}})
    with pytest.raises(Exception, match=r"data-loss.*\[2,5\) were deleted"):
        batch_read(rc_spark, kafka_bootstrap, subscribe=topic, startingOffsets=start)
    rows = batch_read(
        rc_spark, kafka_bootstrap, subscribe=topic, startingOffsets=start, failOnDataLoss="false"
    )
    assert values(rows) == [f"v{i}" for i in range(5, 10)]
    # "earliest" means the log start, which is not data loss
    assert values(batch_read(rc_spark, kafka_bootstrap, subscribe=topic)) == values(rows)
