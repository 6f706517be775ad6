"""Zombie fencing: a newer producer with the same transactional.id fences the older one (KIP-98).

The older instance ("zombie") learns it is fenced only when it next talks to the broker; the
error must then be fatal (the producer can never be used again) and carry a fencing code,
checked by code and flag, never by message text.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from ._support import (
    CLIENT_TIMEOUT_S,
    FENCED_CODES,
    fatal_error_of,
    produce_values,
    read_partition,
    txn_producer,
    unique,
    values,
    wait_stable,
)


@pytest.mark.parametrize("zombie_produces_again", [True, False], ids=["produce", "commit-only"])
def test_older_producer_is_fenced_by_newer_instance(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    new_topic: Callable[..., str],
    zombie_produces_again: bool,
) -> None:
    topic = new_topic("fencing")
    txn_id = unique("fencing")
    zombie = txn_producer(kafka_bootstrap, txn_id)
    zombie.begin_transaction()
    produce_values(zombie, topic, ["zombie-1"])

    successor = txn_producer(kafka_bootstrap, txn_id)  # bumps the epoch, aborts zombie's txn
    successor.begin_transaction()
    produce_values(successor, topic, ["successor-1"])

    if zombie_produces_again:
        # The zombie does not know yet; librdkafka may fail the produce call itself or (more
        # likely) the delivery, and either way commit_transaction must report the fencing.
        try:
            zombie.produce(topic, value=b"zombie-2", partition=0)
        except KafkaException as exc:
            err = fatal_error_of(exc)
            assert err.fatal() and err.code() in FENCED_CODES, err
    with pytest.raises(KafkaException) as info:
        zombie.commit_transaction(CLIENT_TIMEOUT_S)
    err = fatal_error_of(info.value)
    assert err.fatal(), f"fencing must be fatal, got {err}"
    assert err.code() in FENCED_CODES, f"expected a fencing code, got {err}"

    # A fatal producer stays unusable.
    with pytest.raises(KafkaException):
        zombie.begin_transaction()

    successor.commit_transaction(CLIENT_TIMEOUT_S)
    wait_stable(kafka_admin, topic)
    assert values(read_partition(kafka_bootstrap, topic, committed=True)) == ["successor-1"]
    # The zombie's second record was rejected by the broker, not merely hidden.
    assert values(read_partition(kafka_bootstrap, topic, committed=False)) == [
        "zombie-1",
        "successor-1",
    ]
