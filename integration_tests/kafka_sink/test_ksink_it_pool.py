"""Producer reuse across epochs (``connectors.kafka._sink._pool``) against a real broker.

The write task body (``txn._task.run_partition`` with ``KafkaResource``) runs in the test
process, which plays one Spark Python worker: its pool is the worker's pool.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import KafkaException

from connectors.kafka import KafkaCode, KafkaConnectorError, KafkaSink, read_markers
from connectors.kafka._errors import WRITE_CODES
from connectors.kafka._sink import _pool
from connectors.kafka._sink._participant import KafkaParticipant
from connectors.kafka._sink._producers import init_transactions, new_producer, pool_key
from connectors.kafka._sink._resource import KafkaResource
from connectors.kafka._sink._reuse import ReusePolicy, ReuseTicket
from connectors.kafka._sink._writer import DeliveryErrors, RecordLayout
from connectors.stage import ArrowPartition, StageCode, StageEvent, TaskInfo
from connectors.stage._backchannel import BackChannels, StageRun
from connectors.stage._rows import HASH_COLUMN
from integration_tests.kafka_sink._support import (
    WorkerResource,
    expected,
    lso_reaches_high_watermark,
    read_committed,
    rows,
    sid,
    values,
)
from txn import CommitMode, EpochPlan, Guarantee, PartitionReport, TaskStep
from txn._model import PartitionOutcome
from txn._task import run_partition

ROWS = 50


@dataclass(frozen=True)
class RecordingResource(KafkaResource):
    """KafkaResource that remembers the participants it opened."""

    opened: list[KafkaParticipant] = field(default_factory=list, compare=False)

    def open(self, plan: EpochPlan, partition: int) -> KafkaParticipant:
        participant = super().open(plan, partition)
        self.opened.append(participant)
        return participant


@pytest.fixture(autouse=True)
def empty_pool():
    _pool.POOL.clear()
    yield
    _pool.POOL.clear()


@pytest.fixture
def sink(kafka_bootstrap, new_topic, closing):
    topic = new_topic("pool", 1)
    sink = closing(KafkaSink(kafka_bootstrap, topic, sid(), mode="unaligned", create_topics=True))
    sink.preflight()  # creates the marker topic
    return sink


def epoch_rows(epoch: int, *, null_value: bool = False) -> ArrowPartition:
    start = epoch * ROWS
    vals: list[Any] = [f"v{i}".encode() for i in range(start, start + ROWS)]
    if null_value:
        vals[-1] = None
    batch = pa.RecordBatch.from_pydict(
        {
            "value": pa.array(vals, pa.binary()),
            HASH_COLUMN: pa.array(range(start, start + ROWS), pa.int64()),
        }
    )
    return ArrowPartition([batch])


class Driver:
    """The driver's side of reuse: the stage's back channels over one ``ReusePolicy``."""

    def __init__(self, mode: CommitMode = CommitMode.UNALIGNED) -> None:
        self.policy = ReusePolicy()
        self.channels = BackChannels([self.policy])
        self.mode = mode

    def ticket(self, plan: EpochPlan, stage_run: int) -> ReuseTicket:
        """The ticket of one stage run of ``plan``, as the stage hands it out."""
        ticket = self.channels.tickets(StageRun(plan=plan, stage_run=stage_run))[0]
        assert isinstance(ticket, ReuseTicket)
        return ticket

    def plan(self, cfg: Any, epoch: int, *, attempt: int = 0, parallelism: int = 1) -> EpochPlan:
        fingerprint = KafkaResource(cfg=cfg, layout=RecordLayout()).fingerprint()
        return EpochPlan(
            sink_id=cfg.sink_id,
            epoch=epoch,
            parallelism=parallelism,
            fingerprint=fingerprint,
            guarantee=Guarantee.EXACTLY_ONCE,
            mode=self.mode,
            attempt=attempt,
        )

    def run(
        self,
        resource: KafkaResource,
        plan: EpochPlan,
        partition: int = 0,
        *,
        task_attempt: int = 0,
        stage_run: int = 0,
        **kw: Any,
    ) -> tuple[PartitionReport, KafkaParticipant]:
        """Run ``partition`` of ``plan`` as a write task; the driver learns from its report."""
        info: TaskInfo[Any] = TaskInfo(
            partition=partition, task_attempt=task_attempt, ticket=self.ticket(plan, stage_run)
        )
        bound = resource.for_task(info)
        rows = epoch_rows(plan.epoch, null_value=kw.pop("null_value", False))
        try:
            report = run_partition(bound, plan, partition, rows, **kw)
        except BaseException:
            self.channels.event(StageEvent.FAILED_EPOCH)
            raise
        stage = StageRun(plan=plan, stage_run=stage_run)
        self.channels.observe(stage, [report], info.outbox.notes, [(0, plan.parallelism)])
        opened: list[KafkaParticipant] = bound.opened  # type: ignore[attr-defined]
        return report, opened[-1]


DRIVER = Driver()


@pytest.fixture(autouse=True)
def new_driver():
    global DRIVER  # one driver per test
    DRIVER = Driver()


def run(sink: KafkaSink, epoch: int, *, reuse: bool, attempt: int = 0, **kw: Any):
    """Run partition 0 of ``epoch`` as a write task would; ``reuse=False``: a task retry."""
    plan = DRIVER.plan(sink.config, epoch, attempt=attempt)
    resource = RecordingResource(cfg=sink.config, layout=RecordLayout())
    return DRIVER.run(resource, plan, task_attempt=0 if reuse else 1, **kw)


def check_exact(sink: KafkaSink, epochs: int) -> None:
    cfg = sink.config
    assert cfg.topic is not None
    assert values(read_committed(cfg.bootstrap_servers, cfg.topic)) == expected(epochs * ROWS)
    assert lso_reaches_high_watermark(cfg.bootstrap_servers, cfg.topic)
    marker = read_markers(cfg.bootstrap_servers, cfg.sink_id, 1, marker_topic=cfg.marker_topic)[0]
    assert marker is not None and marker.epoch == epochs - 1


def test_producer_is_reused_after_a_clean_commit(sink):
    reused = []
    for epoch in range(3):
        report, participant = run(sink, epoch, reuse=True)
        assert report.outcome is PartitionOutcome.COMMITTED
        reused.append(participant.reused)
    assert reused == [False, True, True]
    check_exact(sink, 3)


def test_retry_attempt_creates_a_new_producer_that_aborts_the_dead_attempt(sink):
    run(sink, 0, reuse=True)

    def die_after_pre_commit(step: TaskStep, plan: EpochPlan, partition: int) -> None:
        if step is TaskStep.PRE_COMMITTED:
            raise RuntimeError("task attempt 0 dies holding an open transaction")

    with pytest.raises(RuntimeError):
        run(sink, 1, reuse=True, hooks=die_after_pre_commit)
    cfg = sink.config
    assert not lso_reaches_high_watermark(cfg.bootstrap_servers, cfg.topic)  # left open
    entry = _pool.POOL.take(pool_key(cfg, 0))
    assert entry is not None and entry.producer is None  # never pooled with an open txn
    _pool.POOL.give_back(pool_key(cfg, 0), entry)
    # The retry (reuse not allowed) inits a new producer: the open transaction is aborted.
    report, participant = run(sink, 1, reuse=False)
    assert report.outcome is PartitionOutcome.COMMITTED and not participant.reused
    check_exact(sink, 2)


def test_retry_never_reuses_even_a_clean_pooled_producer(sink):
    run(sink, 0, reuse=True)
    report, participant = run(sink, 1, reuse=False)
    assert report.outcome is PartitionOutcome.COMMITTED and not participant.reused
    check_exact(sink, 2)


def test_fenced_pooled_producer_fails_and_is_discarded(sink):
    run(sink, 0, reuse=True)
    # Another instance of the id (a retry elsewhere, or start-up recovery) fences it
    # without committing, so the marker still matches the pooled producer's commit.
    KafkaResource(cfg=sink.config, layout=RecordLayout()).abort_lingering([0])
    with pytest.raises(KafkaConnectorError, check=lambda e: e.code in WRITE_CODES):
        run(sink, 1, reuse=True)
    entry = _pool.POOL.take(pool_key(sink.config, 0))
    assert entry is not None and entry.producer is None
    _pool.POOL.give_back(pool_key(sink.config, 0), entry)
    report, participant = run(sink, 1, reuse=False)  # the retry commits
    assert report.outcome is PartitionOutcome.COMMITTED and not participant.reused
    check_exact(sink, 2)


def test_error_discards_the_producer(sink):
    run(sink, 0, reuse=True)
    with pytest.raises(
        KafkaConnectorError,
        check=lambda e: (
            e.code in (StageCode.RECORD, KafkaCode.RECORD_TOO_LARGE, KafkaCode.RECORD_FORMAT)
        ),
    ):
        run(sink, 1, reuse=True, null_value=True)
    entry = _pool.POOL.take(pool_key(sink.config, 0))
    assert entry is not None and entry.producer is None and entry.consumer is not None
    _pool.POOL.give_back(pool_key(sink.config, 0), entry)
    report, participant = run(sink, 1, reuse=True)
    assert report.outcome is PartitionOutcome.COMMITTED and not participant.reused
    check_exact(sink, 2)


def test_partition_committed_by_another_instance_gets_a_new_producer(sink):
    cfg = sink.config
    run(sink, 0, reuse=True)
    mine = _pool.POOL.take(pool_key(cfg, 0))  # this worker's clients, committed epoch 0
    run(sink, 1, reuse=True)  # "another worker" writes epoch 1 (fresh: fences mine)
    other = _pool.POOL.take(pool_key(cfg, 0))
    assert mine is not None and other is not None
    _pool.discard(other)
    _pool.POOL.give_back(pool_key(cfg, 0), mine)
    report, participant = run(sink, 2, reuse=True)  # marker 1 != my commit 0: new producer
    assert report.outcome is PartitionOutcome.COMMITTED and not participant.reused
    check_exact(sink, 3)


def test_producer_pooled_under_another_generation_is_not_reused(sink):
    run(sink, 0, reuse=True)
    DRIVER.policy.renew("e.g. a stage re-run")
    _, participant = run(sink, 1, reuse=True)
    assert not participant.reused
    _, participant = run(sink, 2, reuse=True)
    assert participant.reused
    check_exact(sink, 3)


def test_restarted_sink_in_the_same_application_does_not_reuse_fenced_producers(
    spark, kafka_bootstrap, new_topic, closing
):
    # The second sink's recovery fences the producers the Python workers pooled for the
    # first one; without a new client generation its first epoch would reuse them and
    # fail (stage_retries=0 and local mode: no retry would hide it).
    topic = new_topic("pool-restart", 2)
    sink_id = sid()

    def make() -> KafkaSink:
        return closing(
            KafkaSink(
                kafka_bootstrap,
                topic,
                sink_id,
                mode="unaligned",
                parallelism=2,
                stage_retries=0,
                create_topics=True,
            )
        )

    first = make()
    for epoch in range(3):
        assert first(rows(spark, 20, start=20 * epoch), epoch).committed
    first.close()
    second = make()
    for epoch in range(3, 5):  # its first epoch (the claim), then one more in its generation
        assert second(rows(spark, 20, start=20 * epoch), epoch).committed
    second.close()
    assert values(read_committed(kafka_bootstrap, topic)) == expected(100)
    assert lso_reaches_high_watermark(kafka_bootstrap, topic)


def test_a_task_without_pooled_clients_takes_the_spare_left_by_another(sink):
    # Partition 0's task leaves spares for the sink's other partitions in this worker; the
    # first task of partition 1 here then initializes a spare instead of a new producer.
    cfg = sink.config
    two = DRIVER.plan(cfg, 0, parallelism=2)
    DRIVER.run(RecordingResource(cfg=cfg, layout=RecordLayout()), two, 0)
    lane = _pool.POOL.lanes.claim(cfg.sink_id, cfg.producer_lanes).index
    deadline = time.monotonic() + 30
    while _pool.POOL.spares() < 2 and time.monotonic() < deadline:  # one per partition
        time.sleep(0.05)
    assert _pool.POOL.take(pool_key(cfg, 1, lane)) is None and _pool.POOL.spares() == 2
    report, participant = DRIVER.run(RecordingResource(cfg=cfg, layout=RecordLayout()), two, 1)
    assert report.outcome is PartitionOutcome.COMMITTED
    assert "a spare producer, created earlier" in participant.why_new


@pytest.fixture
def two_workers():
    """Two Python workers of one host: their own pools, hence their own lanes."""
    workers = (_pool.ClientPool(), _pool.ClientPool())
    yield workers
    for worker in workers:
        worker.clear()
        worker.lanes.release()


def on(
    driver: Driver, sink: KafkaSink, worker: _pool.ClientPool, epoch: int, **kw: Any
) -> KafkaParticipant:
    """Run partition 0 of ``epoch`` in ``worker``; it must commit."""
    report, participant = on_any(driver, sink, worker, epoch, **kw)
    assert report.outcome is PartitionOutcome.COMMITTED
    return participant


def on_any(
    driver: Driver, sink: KafkaSink, worker: _pool.ClientPool, epoch: int, **kw: Any
) -> tuple[PartitionReport, KafkaParticipant]:
    """Run partition 0 of ``epoch`` in ``worker``."""
    plan = driver.plan(sink.config, epoch, attempt=kw.pop("attempt", 0))
    resource = WorkerResource(cfg=sink.config, layout=RecordLayout(), pool=worker)
    return driver.run(resource, plan, **kw)


def test_unaligned_a_pooled_producer_fenced_by_the_other_worker_is_replaced_by_its_spare(
    sink, two_workers
):
    # Unaligned: Spark moved partition 0 to worker B for one epoch: B's fresh open wrote on
    # the shared lane, fencing the shared-lane producer worker A pooled. Back in A, the
    # stale producer is not reused (the driver saw B's serve last) and A initializes the
    # spare it keeps for its id, not a new producer (whose init_transactions can wait for
    # librdkafka's 500 ms coordinator-query timer).
    worker_a, worker_b = two_workers
    on(DRIVER, sink, worker_a, 0)
    deadline = time.monotonic() + 30
    while worker_a.spares() < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert worker_a.size() == 1 and worker_a.spares() == 1  # pooled clients and a spare
    assert not on(DRIVER, sink, worker_b, 1).reused  # fences worker A's pooled producer
    back = on(DRIVER, sink, worker_a, 2)
    assert not back.reused
    assert "a spare producer, created earlier" in back.why_new
    check_exact(sink, 3)


def test_aligned_swapped_workers_reuse_their_lanes_producers(sink, two_workers):
    # Aligned: partition 0 alternates between the two workers of a host (Spark's idle
    # FIFO). After each worker's first task, every task reuses its lane's producer:
    # no init_transactions (InitProducerId) and no coordinator look-up any more.
    driver = Driver(CommitMode.ALIGNED)
    worker_a, worker_b = two_workers
    served = [on(driver, sink, (worker_a, worker_b)[epoch % 2], epoch) for epoch in range(6)]
    assert [p.reused for p in served] == [False, False, True, True, True, True]
    lanes = {
        worker_a.lanes.claim(sink.config.sink_id, 2).index,
        worker_b.lanes.claim(sink.config.sink_id, 2).index,
    }
    assert lanes == {1, 2}  # worker lanes; no worker claims the shared lane 0
    check_exact(sink, 6)


def test_aligned_a_retry_fences_every_lane_and_the_swap_reuse_resumes(sink, two_workers):
    driver = Driver(CommitMode.ALIGNED)
    worker_a, worker_b = two_workers
    on(driver, sink, worker_a, 0)
    on(driver, sink, worker_b, 1)
    retry = on(driver, sink, worker_a, 2, task_attempt=1)  # fences lane B's producer too
    assert not retry.reused and retry.why_new.endswith("every lane fenced")
    driver.policy.renew("the driver saw a task retry")
    # A new generation: the first fresh open fences every lane again (the driver has not
    # seen the partition served since); then each worker warms its own lane once.
    workers = (worker_a, worker_b)
    reused = [on(driver, sink, workers[epoch % 2], epoch).reused for epoch in range(3, 9)]
    assert reused == [False, False, True, True, True, True]
    check_exact(sink, 9)


def test_at_least_once_producer_is_pooled_per_worker(kafka_bootstrap, new_topic, closing):
    topic = new_topic("pool-alo", 1)
    alo = closing(KafkaSink(kafka_bootstrap, topic, sid(), guarantee="at-least-once"))
    reused = []
    for epoch in range(2):
        resource = RecordingResource(cfg=alo.config, layout=RecordLayout())
        plan = EpochPlan(
            sink_id=alo.config.sink_id,
            epoch=epoch,
            parallelism=1,
            fingerprint=resource.fingerprint(),
            guarantee=Guarantee.AT_LEAST_ONCE,
            mode=CommitMode.UNALIGNED,
        )
        assert run_partition(resource, plan, 0, epoch_rows(epoch)).outcome is (
            PartitionOutcome.COMMITTED
        )
        reused.append(resource.opened[0].reused)
    assert reused == [False, True]
    assert values(read_committed(kafka_bootstrap, topic)) == expected(2 * ROWS)


def redo_elsewhere(path: str, driver: Driver, sink: KafkaSink, worker: _pool.ClientPool) -> None:
    """Write epoch 2 of partition 0 again in ``worker`` on the non-steady ``path``."""
    if path == "task retry":
        on(driver, sink, worker, 2, task_attempt=1)
    elif path == "stage re-run":
        driver.policy.renew("a stage re-run")
        on(driver, sink, worker, 2, stage_run=1)
    else:  # recovery at start-up: fence every lane, then the in-doubt epoch's redo
        KafkaResource(cfg=sink.config, layout=RecordLayout()).abort_lingering([0])
        driver.policy.renew("recovery")
        on(driver, sink, worker, 2, attempt=1)


@pytest.mark.parametrize("path", ["task retry", "stage re-run", "recovery"])
def test_a_zombie_on_one_lane_cannot_commit_after_another_lane_redid_the_partition(
    sink, two_workers, path
):
    # Worker A's attempt of epoch 2 (a pooled producer, its own lane) stops after its
    # pre-commit, its transaction open; the non-steady path redoes the partition in worker
    # B on the other lane, fencing every lane first. A then resumes and commits: fenced.
    driver = Driver(CommitMode.ALIGNED)
    worker_a, worker_b = two_workers
    on(driver, sink, worker_a, 0)
    on(driver, sink, worker_b, 1)  # both lanes warm
    held, resume = threading.Event(), threading.Event()

    def hold(step: TaskStep, plan: EpochPlan, partition: int) -> None:
        if step is TaskStep.PRE_COMMITTED:
            held.set()
            resume.wait(60)

    zombie: dict[str, Any] = {}

    def attempt() -> None:
        try:
            zombie["report"], zombie["participant"] = on_any(driver, sink, worker_a, 2, hooks=hold)
        except Exception as exc:  # noqa: BLE001 - inspected below
            zombie["error"] = exc

    thread = threading.Thread(target=attempt)
    thread.start()
    try:
        assert held.wait(60)
        redo_elsewhere(path, driver, sink, worker_b)
    finally:
        resume.set()
        thread.join(60)
    report = zombie.get("report")
    assert report is None or report.outcome is not PartitionOutcome.COMMITTED, zombie
    check_exact(sink, 3)


def test_abort_lingering_fences_every_lane_of_a_partition(sink):
    # Open transactions on every lane of partition 0 (zombies of two workers and of a
    # redo on the shared lane) pin the last stable offset until recovery or a shrink
    # aborts them: every lane, not only the shared lane 0.
    cfg = sink.config
    assert cfg.topic is not None
    zombies = []
    for lane in range(cfg.producer_lanes + 1):
        producer = new_producer(cfg, cfg.transactional_id(0, lane), DeliveryErrors())
        init_transactions(producer, cfg.transactional_id(0, lane))
        producer.begin_transaction()
        producer.produce(cfg.topic, value=f"zombie lane {lane}".encode())
        producer.flush(30)
        zombies.append(producer)
    assert not lso_reaches_high_watermark(cfg.bootstrap_servers, cfg.topic)
    KafkaResource(cfg=cfg, layout=RecordLayout()).abort_lingering([0])
    assert lso_reaches_high_watermark(cfg.bootstrap_servers, cfg.topic)
    for producer in zombies:
        with pytest.raises(KafkaException):
            producer.commit_transaction(30)
    assert not values(read_committed(cfg.bootstrap_servers, cfg.topic))


def test_unaligned_fresh_opens_write_on_the_shared_lane_and_each_worker_serves_once_prepared(
    sink, two_workers
):
    # Unaligned: no vote round orders a slow first attempt against a retry, so every fresh
    # open writes on the shared lane 0 (one identity, as without lanes), which no worker
    # claims. Each worker prepares its own lane after writing on the shared lane
    # (``_prepare``), also worker A of lane 1; once the driver knows a prepared producer it
    # serves there (reused), and a fresh open on the shared lane does not fence it.
    worker_a, worker_b = two_workers

    def prepared(worker: _pool.ClientPool, lane: int) -> None:
        deadline = time.monotonic() + 60
        while worker.token_of(pool_key(sink.config, 0, lane)) is None:
            assert time.monotonic() < deadline, f"lane {lane} not prepared"
            time.sleep(0.02)

    assert worker_a.lanes.claim(sink.config.sink_id, 2).index == 1
    assert worker_b.lanes.claim(sink.config.sink_id, 2).index == 2
    assert not on(DRIVER, sink, worker_b, 0).reused
    assert on(DRIVER, sink, worker_b, 1).reused  # on the shared lane; then B prepares lane 2
    assert not on(DRIVER, sink, worker_a, 2).reused  # fences B's shared-lane producer only
    prepared(worker_a, 1)  # worker A of lane 1 prepares in unaligned epochs too
    assert on(DRIVER, sink, worker_a, 3).reused  # on the shared lane; reports lane 1
    prepared(worker_b, 2)
    fresh = on(DRIVER, sink, worker_b, 4)  # the shared lane was fenced by A; reports lane 2
    assert not fresh.reused
    assert fresh.why_new.startswith("lane 0 was last served by another instance")
    plan = DRIVER.plan(sink.config, 5)
    assert [(n.lane, n.prepared) for n in DRIVER.ticket(plan, 0).known] == [
        (0, False),
        (1, True),
        (2, True),
    ]
    # From here on every task reuses its worker's own lane, also after B's fresh open on
    # the shared lane in epoch 4 (A's lane-1 producer was prepared before it).
    workers = (worker_a, worker_b)
    assert [on(DRIVER, sink, workers[e % 2], e).reused for e in range(5, 9)] == [True] * 4
    served = {n.lane: n for n in DRIVER.ticket(DRIVER.plan(sink.config, 9), 0).known}
    assert served[1].reused and not served[1].prepared, "epoch 7 was served on lane 1"
    assert served[2].reused and not served[2].prepared, "epoch 8 was served on lane 2"
    check_exact(sink, 9)


@pytest.mark.parametrize("mode", [CommitMode.ALIGNED, CommitMode.UNALIGNED])
def test_a_fresh_open_reads_the_marker_another_worker_committed(sink, two_workers, mode):
    # Worker B's first task of partition 0 (fresh, its own lane) and a redo there (every
    # lane fenced) must find worker A's commit: the redo skips, the next epoch follows on.
    driver = Driver(mode)
    worker_a, worker_b = two_workers
    on(driver, sink, worker_a, 0)
    report, fresh = on_any(driver, sink, worker_b, 0, task_attempt=1)  # a retry of epoch 0
    assert report.outcome is PartitionOutcome.ALREADY_COMMITTED and not fresh.reused
    driver.policy.renew("the driver saw a task retry")
    workers = (worker_a, worker_b)
    reused = [on(driver, sink, workers[epoch % 2], epoch).reused for epoch in range(1, 6)]
    # aligned: both lanes warm after one task each; unaligned: every fresh open on the
    # shared lane, each a miss (A prepares lane 1 after epoch 2, B lane 2 after epoch 3;
    # the driver learns them from epochs 4 and 5)
    assert reused == (
        [False, False, True, True, True] if mode is CommitMode.ALIGNED else [False] * 5
    )
    check_exact(sink, 6)
