"""Prepared producers in real Spark (local[2], two Python workers): steady epochs reuse.

Spark hands each write task to whichever Python worker has been idle longest, so the two
partitions swap workers in most epochs. Once each worker's preparations have reached the
driver (``connectors.kafka._sink._prepare``), epochs, aligned or unaligned, are served by
pooled producers whichever worker gets which partition (the two-pool tests in
``test_ksink_it_prepared.py`` prove each step exactly).

A worker prepares in the background after its task; on a loaded machine a preparation
could still run when the worker's next task reported, and that epoch opened new
producers. So after each epoch the test waits, in every worker, for its preparation
rounds to end (``_support.preparations_ended``): the event the next epochs' reuse depends
on. Then the steady epochs open no new producer, asserted exactly whenever every worker
runs a task of every epoch.

Each worker needs a lane of its own (``producer_lanes``): the session may run more Python
workers than task slots (earlier tests ran a Python UDF beside ``mapInArrow`` in one task),
and a worker beyond the lanes writes on the shared lane and prepares nothing. With two
lanes and four workers, steady epochs opened two new producers every other epoch (CI:
aligned [2, 2, 0, 2, 0, 2, 0, 0], unaligned [2, 2, 2, 2, 2, 2, 0, 2]), so the sink gets one
lane per worker the session has, as docs/kafka-sink.md tells users to set it.
"""

from __future__ import annotations

import pytest

from connectors.kafka import KafkaSink
from integration_tests.kafka_sink._support import (
    expected,
    lso_reaches_high_watermark,
    preparations_ended,
    python_workers,
    read_committed,
    rows,
    sid,
    values,
)

PER_EPOCH = 60
# Epochs before the steady state: the first (fresh producers, preparations start), the
# second (its tasks report them), then one more for a worker started late by Spark.
WARM_EPOCHS = 3
# Unaligned: one epoch more; a worker prepares only partitions the driver has seen served
# (their first open fences every lane), so preparations start after the second epoch.
WARM_EPOCHS_UNALIGNED = WARM_EPOCHS + 1
# Steady epochs asserted: the partitions swap workers in most epochs, so three see both
# assignments with near certainty (more epochs repeat the same two assignments).
STEADY_EPOCHS = 3


@pytest.mark.parametrize("mode", ["aligned", "unaligned"])
def test_steady_epochs_are_served_by_pooled_producers_whichever_worker_gets_a_task(
    spark, kafka_bootstrap, new_topic, closing, mode
):
    workers = python_workers(spark)
    # Write tasks: one per worker where the mode allows it (unaligned), so every worker runs
    # a task of every epoch; aligned runs an epoch's tasks at once, in the 2 task slots.
    width = max(2, workers) if mode == "unaligned" else 2
    topic = new_topic(f"prepared-{mode}", width)
    sink = closing(
        KafkaSink(
            kafka_bootstrap,
            topic,
            sid(),
            parallelism=width,
            mode=mode,
            producer_lanes=max(2, workers),
        )
    )
    warm = WARM_EPOCHS if mode == "aligned" else WARM_EPOCHS_UNALIGNED
    epochs = warm + STEADY_EPOCHS
    for epoch in range(epochs):
        sink(rows(spark, PER_EPOCH, epoch * PER_EPOCH), epoch)
        preparations_ended(spark, workers)  # the event the next epochs' reuse depends on
    metrics = sink.metrics()
    sink.close()
    assert [m.epoch for m in metrics if m.committed] == list(range(epochs))
    assert values(read_committed(kafka_bootstrap, topic)) == expected(epochs * PER_EPOCH)
    assert lso_reaches_high_watermark(kafka_bootstrap, topic)
    new = [m.clients_new for m in metrics]
    assert new[0] == width, new  # nothing pooled in a new sink's generation
    steady = new[warm:]
    if width >= workers:
        # Every worker runs a task of every epoch, and its preparations ended before the
        # next epoch: each has reported them by the steady epochs, all served pooled.
        assert steady == [0] * len(steady), (new, workers)
    else:
        # More workers than tasks (aligned, once Spark keeps a second worker per slot):
        # which worker gets a task follows the order Spark's workers went idle, so one may
        # get its first task late and open producers then; pooled producers serve the rest.
        assert min(steady) < width, (new, workers)
