"""The checker against a real broker, with hand-made transactions (no sink involved).

Plain transactional producers commit, abort, leave open and duplicate records; the checker
must tell each situation apart through its Kafka reads and its raw batch scan.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaException, Producer

from connectors.verify import (
    AnomalyKind,
    Record,
    check_exactly_once,
    produce_input,
    read_committed_topic,
)

# Seconds for transactional producer calls on a busy machine.
TXN_TIMEOUT_S = 60.0


def _txn_producer(bootstrap: str, txn_id: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": 600_000,
        }
    )
    producer.init_transactions(TXN_TIMEOUT_S)
    return producer


def _write(producer: Producer, topic: str, records: list[Record], *, commit: bool | None) -> None:
    producer.begin_transaction()
    for r in records:
        producer.produce(topic, key=r.key, value=r.value)
    producer.flush(TXN_TIMEOUT_S)
    if commit is True:
        producer.commit_transaction(TXN_TIMEOUT_S)
    elif commit is False:
        producer.abort_transaction(TXN_TIMEOUT_S)


def _check(bootstrap: str, inp: str, out: str):  # type: ignore[no-untyped-def]
    return check_exactly_once(
        bootstrap, input_topic=inp, output_topic=out, sink_id="unused", verify_epoch_log=False
    )


@pytest.mark.timeout(300)
def test_checker_sees_commits_aborts_open_and_duplicates(
    kafka_bootstrap: str, new_topic: Callable[..., str]
) -> None:
    inp = new_topic("chk-in", partitions=2)
    out = new_topic("chk-out", partitions=2)
    produce_input(kafka_bootstrap, inp, 30, keys=4)
    src = sorted(read_committed_topic(kafka_bootstrap, inp), key=lambda r: (r.partition, r.offset))
    assert len(src) == 30
    tid = f"chk-{uuid.uuid4().hex[:8]}"

    a = _txn_producer(kafka_bootstrap, f"{tid}-a")
    _write(a, out, src[:20], commit=True)
    _write(a, out, src[:5], commit=False)  # an aborted attempt: hidden, not a duplicate
    report = _check(kafka_bootstrap, inp, out)
    assert report.count(AnomalyKind.LOST) == 10
    assert report.aborted_records == 5
    assert report.abort_markers >= 1 and report.commit_markers >= 1
    assert report.count(AnomalyKind.DUPLICATE) == 0
    assert report.count(AnomalyKind.ABORTED_READ) == 0

    _write(a, out, src[20:], commit=True)
    assert _check(kafka_bootstrap, inp, out).ok

    zombie = _txn_producer(kafka_bootstrap, f"{tid}-b")
    _write(zombie, out, src[25:26], commit=None)  # left open
    report = _check(kafka_bootstrap, inp, out)
    assert report.count(AnomalyKind.OPEN_TRANSACTION) >= 1
    assert report.count(AnomalyKind.DUPLICATE) == 0  # read_committed stops at the LSO

    successor = _txn_producer(kafka_bootstrap, f"{tid}-b")  # fences the zombie, aborts its txn
    with pytest.raises(KafkaException) as info:
        zombie.commit_transaction(TXN_TIMEOUT_S)
    assert info.value.args[0].fatal() or info.value.args[0].txn_requires_abort()
    report = _check(kafka_bootstrap, inp, out)
    assert report.ok, report.examples
    assert report.aborted_records == 6

    _write(successor, out, src[3:4], commit=True)  # a committed duplicate
    report = _check(kafka_bootstrap, inp, out)
    assert report.count(AnomalyKind.DUPLICATE) + report.count(AnomalyKind.ZOMBIE_COMMIT) == 1
    assert not report.ok
