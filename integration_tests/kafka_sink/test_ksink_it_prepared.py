"""Prepared producers (``connectors.kafka._sink._prepare``) against a real broker.

Two ``ClientPool`` objects play the two Python workers of one host (their own lanes); the
write task body (``txn._task.run_partition``) runs in the test process, one stage run at a time
with one ticket, as the driver would issue it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition

from connectors.kafka import KafkaSink, read_markers
from connectors.kafka._sink import _pool
from connectors.kafka._sink._lanes import SHARED_LANE
from connectors.kafka._sink._participant import KafkaParticipant
from connectors.kafka._sink._producers import pool_key
from connectors.kafka._sink._resource import KafkaResource
from connectors.kafka._sink._reuse import ProducerNote, ReusePolicy, ReuseTicket
from connectors.kafka._sink._writer import RecordLayout
from connectors.stage import ArrowPartition, TaskInfo
from connectors.stage._backchannel import BackChannels, StageRun
from connectors.stage._rows import HASH_COLUMN
from integration_tests.kafka_sink._support import (
    WorkerResource,
    lso_reaches_high_watermark,
    read_committed,
    sid,
    values,
)
from txn import CommitMode, EpochPlan, Guarantee, PartitionReport, TaskStep, Vote
from txn._model import PartitionOutcome
from txn._task import run_partition

ROWS = 20
PARALLELISM = 2
# Seconds to wait for a worker's background preparation (a few init_transactions).
PREPARE_WAIT_S = 60.0
# The worker lanes workers A and B claim (no worker claims the shared lane 0).
LANE_A, LANE_B = 1, 2


@dataclass
class Served:
    participant: KafkaParticipant
    notes: list[ProducerNote]
    report: PartitionReport

    @property
    def outcome(self) -> PartitionOutcome:
        return self.report.outcome


class Driver:
    """Tickets of one ``ReusePolicy``: one per stage run, learning from all its tasks."""

    def __init__(self, sink: KafkaSink, mode: CommitMode) -> None:
        self.policy = ReusePolicy()
        self.channels = BackChannels([self.policy])  # the stage's side of it
        self.sink = sink
        self.mode = mode

    def ticket(self, plan: EpochPlan, stage_run: int) -> ReuseTicket:
        """The ticket of one stage run of ``plan``, as the stage hands it out."""
        ticket = self.channels.tickets(StageRun(plan=plan, stage_run=stage_run))[0]
        assert isinstance(ticket, ReuseTicket)
        return ticket

    def plan(self, epoch: int, attempt: int = 0) -> EpochPlan:
        cfg = self.sink.config
        fingerprint = KafkaResource(cfg=cfg, layout=RecordLayout()).fingerprint()
        return EpochPlan(
            sink_id=cfg.sink_id,
            epoch=epoch,
            parallelism=PARALLELISM,
            fingerprint=fingerprint,
            guarantee=Guarantee.EXACTLY_ONCE,
            mode=self.mode,
            attempt=attempt,
        )

    def task(
        self,
        ticket: ReuseTicket,
        plan: EpochPlan,
        partition: int,
        worker: _pool.ClientPool,
        opened: list[KafkaParticipant] | None = None,
        task_attempt: int = 0,
        **kw: Any,
    ) -> Served:
        """Run one task of ``plan`` in ``worker`` (its participant also goes to ``opened``)."""
        info: TaskInfo[Any] = TaskInfo(
            partition=partition, task_attempt=task_attempt, ticket=ticket
        )
        cfg, into = self.sink.config, opened if opened is not None else []
        resource = WorkerResource(cfg=cfg, layout=RecordLayout(), pool=worker, opened=into)
        bound = resource.for_task(info)
        report = run_partition(bound, plan, partition, rows(plan.epoch, partition), **kw)
        return Served(resource.opened[-1], [n for _, n in info.outbox.notes], report)

    def stage(self, epoch: int, *tasks: tuple[int, _pool.ClientPool]) -> list[Served]:
        """One stage run of ``epoch``: each (partition, worker) task, then the driver learns.

        Aligned: the tasks run at once and vote (every open precedes every commit, as in
        a barrier stage); unaligned: one after the other (one order Spark may choose).
        """
        plan = self.plan(epoch)
        ticket = self.ticket(plan, 0)
        if self.mode is CommitMode.UNALIGNED:
            served = [self.task(ticket, plan, p, worker) for p, worker in tasks]
        else:
            gather = votes(len(tasks))
            with ThreadPoolExecutor(len(tasks)) as pool:
                futures = [
                    pool.submit(self.task, ticket, plan, p, worker, gather=gather)
                    for p, worker in tasks
                ]
                served = [f.result(timeout=120) for f in futures]
        assert all(s.outcome is PartitionOutcome.COMMITTED for s in served)
        notes = [n for s in served for n in s.notes]
        self.policy.observe(StageRun(plan=plan), [s.report for s in served], notes)
        return served


def votes(tasks: int) -> Callable[[Vote], list[Vote]]:
    """A vote round of ``tasks`` tasks in threads (what the driver's vote channel does)."""
    barrier = threading.Barrier(tasks)
    cast: list[Vote] = []
    lock = threading.Lock()

    def gather(vote: Vote) -> list[Vote]:
        with lock:
            cast.append(vote)
        barrier.wait(60)
        return list(cast)

    return gather


def rows(epoch: int, partition: int) -> ArrowPartition:
    vals = [f"e{epoch}p{partition}r{i}".encode() for i in range(ROWS)]
    batch = pa.RecordBatch.from_pydict(
        {
            "value": pa.array(vals, pa.binary()),
            HASH_COLUMN: pa.array(range(ROWS), pa.int64()),
        }
    )
    return ArrowPartition([batch])


def check_exact(sink: KafkaSink, epochs: int) -> None:
    """Every partition of epochs ``0 .. epochs-1`` committed exactly once, nothing else."""
    cfg = sink.config
    assert cfg.topic is not None
    want = Counter(
        f"e{e}p{p}r{i}".encode()
        for e in range(epochs)
        for p in range(PARALLELISM)
        for i in range(ROWS)
    )
    assert values(read_committed(cfg.bootstrap_servers, cfg.topic)) == want
    assert lso_reaches_high_watermark(cfg.bootstrap_servers, cfg.topic)
    markers = read_markers(
        cfg.bootstrap_servers, cfg.sink_id, PARALLELISM, marker_topic=cfg.marker_topic
    )
    assert [markers[p].epoch if markers[p] else None for p in range(PARALLELISM)] == [
        epochs - 1
    ] * PARALLELISM


@pytest.fixture
def sink(kafka_bootstrap, new_topic, closing):
    topic = new_topic("prepared", 1)
    sink = closing(KafkaSink(kafka_bootstrap, topic, sid(), create_topics=True))
    sink.preflight()  # creates the marker topic
    return sink


@pytest.fixture
def workers(sink):
    """Workers A and B of one host: their own pools; A claims lane 1, B lane 2."""
    pair = (_pool.ClientPool(), _pool.ClientPool())
    for lane, worker in zip((LANE_A, LANE_B), pair, strict=True):
        assert worker.lanes.claim(sink.config.sink_id, sink.config.producer_lanes).index == lane
    yield pair
    for worker in pair:
        worker.clear()
        worker.lanes.release()


def wait_prepared(sink: KafkaSink, worker: _pool.ClientPool, partition: int, lane: int) -> None:
    """Wait until ``worker`` pooled a producer of ``partition`` on ``lane`` (prepared)."""
    key = pool_key(sink.config, partition, lane)
    deadline = time.monotonic() + PREPARE_WAIT_S
    while worker.token_of(key) is None:
        assert time.monotonic() < deadline, f"partition {partition} lane {lane} not prepared"
        time.sleep(0.02)


def warm(driver: Driver, sink: KafkaSink, a: _pool.ClientPool, b: _pool.ClientPool) -> int:
    """A writes partition 0, B partition 1, until their preparations reached the driver.

    Aligned: both prepare the other partition after epoch 0 and report in epoch 1.
    Unaligned: fresh opens write on the shared lane, and a worker prepares only once the
    driver has seen the partitions served: both prepare their own lane of both partitions
    after epoch 1 (the one each wrote too: it wrote it on the shared lane) and report in
    epoch 2. Returns the next epoch.
    """
    aligned = driver.mode is CommitMode.ALIGNED
    first = driver.stage(0, (0, a), (1, b))
    assert [s.participant.reused for s in first] == [False, False]
    lanes = [n.lane for s in first for n in s.notes]
    assert lanes == ([LANE_A, LANE_B] if aligned else [SHARED_LANE, SHARED_LANE])
    epoch = 1
    if not aligned:
        driver.stage(epoch, (0, a), (1, b))
        epoch += 1
    wanted = {(1, LANE_A), (0, LANE_B)} if aligned else {(p, k) for p in (0, 1) for k in (1, 2)}
    for partition, lane in wanted:
        wait_prepared(sink, a if lane == LANE_A else b, partition, lane)
    reporting = driver.stage(epoch, (0, a), (1, b))
    assert all(s.participant.reused for s in reporting), [s.participant.why_new for s in reporting]
    reported = {(n.partition, n.lane) for s in reporting for n in s.notes if n.prepared}
    assert reported == wanted
    return epoch + 1


def test_aligned_a_swap_after_the_preparations_reached_the_driver_reuses_on_both_workers(
    sink, workers
):
    driver = Driver(sink, CommitMode.ALIGNED)
    a, b = workers
    epoch = warm(driver, sink, a, b)
    swapped = driver.stage(epoch, (1, a), (0, b))  # Spark moved both tasks to the other worker
    for served in swapped:
        assert served.participant.reused, served.participant.why_new
        assert [n.reused for n in served.notes if not n.prepared] == [True]
    assert all(s.participant.reused for s in driver.stage(epoch + 1, (0, a), (1, b)))
    check_exact(sink, epoch + 2)
    # The preparations' warm-up transactions staged an offset of each marker group for the
    # output topic and were aborted: nothing of them is visible.
    cfg = sink.config
    for partition in range(PARALLELISM):
        reader = Consumer(
            {
                "bootstrap.servers": cfg.bootstrap_servers,
                "group.id": cfg.marker_group(partition),
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        try:
            (committed,) = reader.committed([TopicPartition(cfg.topic, 0)], timeout=30)
        finally:
            reader.close()
        assert committed.offset < 0, committed


def test_unaligned_a_swap_reuses_on_both_workers_and_a_shared_lane_open_fences_neither(
    sink, workers
):
    # Unaligned: after the warm-up both workers (lanes 1 and 2) serve either partition
    # with a prepared producer, also after a swap. A worker holding no lane (a third one
    # on a host of two lanes) writes on the shared lane: its fresh open fences only the
    # shared lane, so worker A's producer of lane 1 still serves, and it prepares nothing.
    driver = Driver(sink, CommitMode.UNALIGNED)
    a, b = workers
    epoch = warm(driver, sink, a, b)
    at_a, at_b = driver.stage(epoch, (1, a), (0, b))  # Spark moved both tasks
    for served, lane in ((at_a, LANE_A), (at_b, LANE_B)):
        assert served.participant.reused, served.participant.why_new
        assert [n.lane for n in served.notes if not n.prepared] == [lane]
    c = _pool.ClientPool()
    try:
        assert not c.lanes.claim(sink.config.sink_id, sink.config.producer_lanes).claimed
        at_c, at_b = driver.stage(epoch + 1, (0, c), (1, b))
        assert not at_c.participant.reused
        assert [(n.lane, n.fenced_all) for n in at_c.notes] == [(SHARED_LANE, False)]
        at_a, at_b = driver.stage(epoch + 2, (0, a), (1, b))
        assert at_a.participant.reused, at_a.participant.why_new
        assert [n.lane for n in at_a.notes if not n.prepared] == [LANE_A]
        cfg = sink.config
        assert c.token_of(pool_key(cfg, 0, SHARED_LANE)) is not None
        prepared = [c.token_of(pool_key(cfg, p, k)) for p in (0, 1) for k in (LANE_A, LANE_B)]
        assert prepared == [None] * 4, "a worker without a lane prepares nothing"
    finally:
        c.clear()
        c.lanes.release()
    check_exact(sink, epoch + 3)


def redo(path: str, driver: Driver, epoch: int, worker: _pool.ClientPool) -> None:
    """Write ``epoch`` of partition 0 again in ``worker`` on the non-steady ``path``."""
    if path == "task retry":  # same stage run, attempt 1
        plan = driver.plan(epoch)
        ticket, attempt = driver.ticket(plan, 0), 1
    elif path == "stage re-run":
        driver.policy.renew("a stage re-run")
        plan = driver.plan(epoch)
        ticket, attempt = driver.ticket(plan, 1), 0
    else:  # recovery at start-up: fence every lane, then the in-doubt epoch's redo
        KafkaResource(cfg=driver.sink.config, layout=RecordLayout()).abort_lingering([0, 1])
        driver.policy.renew("recovery")
        plan = driver.plan(epoch, attempt=1)
        ticket, attempt = driver.ticket(plan, 0), 0
    served = driver.task(ticket, plan, 0, worker, task_attempt=attempt)
    assert served.outcome is PartitionOutcome.COMMITTED
    assert [(n.lane, n.fenced_all) for n in served.notes if not n.prepared] == [(SHARED_LANE, True)]


def zombie_then_redo(
    driver: Driver, epoch: int, zombie_worker: _pool.ClientPool, redo_in: Any
) -> dict[str, Any]:
    """Partition 0 of ``epoch`` in ``zombie_worker`` stops after its pre-commit; ``redo_in()``
    redoes it elsewhere; then the zombie resumes. Returns what the zombie ended with."""
    held, resume = threading.Event(), threading.Event()

    def hold(step: TaskStep, plan: EpochPlan, partition: int) -> None:
        if step is TaskStep.PRE_COMMITTED:
            held.set()
            resume.wait(60)

    zombie: dict[str, Any] = {}
    plan = driver.plan(epoch)
    ticket = driver.ticket(plan, 0)
    opened: list[KafkaParticipant] = []

    def attempt() -> None:
        try:
            zombie["served"] = driver.task(ticket, plan, 0, zombie_worker, opened, hooks=hold)
        except Exception as exc:  # noqa: BLE001 - inspected by the caller
            zombie["error"] = exc
        zombie["participant"] = opened[-1]

    thread = threading.Thread(target=attempt)
    thread.start()
    try:
        assert held.wait(60)
        redo_in()
    finally:
        resume.set()
        thread.join(60)
    return zombie


@pytest.mark.parametrize("path", ["task retry", "stage re-run", "recovery"])
def test_a_prepared_zombie_cannot_commit_after_a_redo_fenced_every_lane(sink, workers, path):
    # Aligned: worker B's producer of partition 0 on lane 2 was prepared (B only wrote
    # partition 1); Spark hands B partition 0 and it reuses the prepared producer, then
    # stops after its pre-commit. The redo in worker A fences every lane (the shared one
    # it writes on too): B cannot commit.
    driver = Driver(sink, CommitMode.ALIGNED)
    a, b = workers
    epoch = warm(driver, sink, a, b)
    zombie = zombie_then_redo(driver, epoch, b, lambda: redo(path, driver, epoch, a))
    assert zombie["participant"].reused, "the zombie served with its prepared producer"
    assert "error" in zombie and "served" not in zombie, zombie
    driver.policy.renew("the failed attempt")  # partition 1 of the epoch, so both end there
    plan = driver.plan(epoch, attempt=1)
    assert driver.task(driver.ticket(plan, 0), plan, 1, a).outcome is (PartitionOutcome.COMMITTED)
    check_exact(sink, epoch + 1)


@pytest.mark.parametrize("zombie_lane", [LANE_A, LANE_B])
def test_unaligned_a_prepared_producer_cannot_commit_after_a_task_retry(sink, workers, zombie_lane):
    # Unaligned: the first attempt of partition 0 reuses its worker's (prepared) producer
    # on lane 1 or 2 and is slow; Spark retries the task in the other worker, which
    # fences every lane and writes on the shared lane. The slow attempt was initialized
    # before the epoch was planned, so the retry's fence covers it: it cannot commit.
    driver = Driver(sink, CommitMode.UNALIGNED)
    a, b = workers
    epoch = warm(driver, sink, a, b)
    slow, other = (a, b) if zombie_lane == LANE_A else (b, a)
    zombie = zombie_then_redo(driver, epoch, slow, lambda: redo("task retry", driver, epoch, other))
    assert zombie["participant"].reused, "the slow attempt served with its prepared producer"
    assert "error" in zombie and "served" not in zombie, zombie
    driver.policy.renew("a Spark task retry")
    plan = driver.plan(epoch)
    assert driver.task(driver.ticket(plan, 0), plan, 1, a).outcome is (PartitionOutcome.COMMITTED)
    check_exact(sink, epoch + 1)
