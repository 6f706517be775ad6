"""Crash-injection world for the Kafka sink's resource: a real broker, txn coordinator, threads.

Durable: the Kafka cluster (the output topic, the markers, the Kafka epoch log). In process
and dropped at every simulated driver crash: the epoch log handle, the resource, the
coordinator, the back channel's driver side. The test process also plays the Python worker
every write task runs in: under the pooled strategy its client pool (``_pool.POOL``) and
lane outlive a driver crash, as a worker outlives a new sink object of the same
application. The driver and the crash points are ``txn.testing``'s
(:class:`~txn.testing.CrashWorld`, :class:`~txn.testing.Crash`).

The write stage is the generic stage's in miniature, without Spark: each run of it asks
the connector's back channel for the run's ticket, binds every task to it (``TaskInfo``)
and hands the tasks' notes back after a run that succeeded (``BackChannels``), so the
pooled strategy's reuse rules decide here as they do under Spark.
"""

from __future__ import annotations

import functools
import uuid
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from connectors.kafka import read_markers
from connectors.kafka._sink._config import SinkConfig
from connectors.kafka._sink._participant import KafkaParticipant
from connectors.kafka._sink._resource import KafkaResource
from connectors.kafka._sink._sink import KafkaConnector
from connectors.kafka._sink._writer import RecordLayout
from connectors.stage import ArrowPartition, TaskInfo
from connectors.stage._backchannel import BackChannels, StageRun
from connectors.stage._rows import HASH_COLUMN
from connectors.stage._task import TaskOutbox
from integration_tests.kafka_sink._support import (
    lso_reaches_high_watermark,
    read_committed,
    values,
)
from txn import EpochLog, EpochPlan, PartitionReport
from txn._coordinator import Execute
from txn._executor import InProcessExecutor
from txn.testing import CrashWorld
from txn.testing._crash import FULL, epoch_size

ROWS_PER_EPOCH = 12


def epoch_keys(epoch: int, shape: str = FULL) -> list[str]:
    """The keys of ``epoch``'s rows (a row's value is its key); ``shape``: ``txn.testing``."""
    return [f"e{epoch}-r{i}" for i in range(epoch_size(epoch, shape, ROWS_PER_EPOCH))]


def partition_batch(epoch: int, parallelism: int, partition: int, shape: str) -> pa.RecordBatch:
    """The rows of ``partition``: routed by content, so a replay meets the same partition."""
    keys = [
        k for k in epoch_keys(epoch, shape) if zlib.crc32(k.encode()) % parallelism == partition
    ]
    raw = [k.encode() for k in keys]
    return pa.RecordBatch.from_pydict(
        {
            "key": pa.array(raw, pa.binary()),
            "value": pa.array(raw, pa.binary()),
            HASH_COLUMN: pa.array([zlib.crc32(b"h" + k) for k in raw], pa.int64()),
        }
    )


@dataclass(frozen=True)
class TaskBinding(KafkaResource):
    """The resource as the stage binds it in each task of one run: the run's ticket."""

    ticket: object = None
    outboxes: dict[int, TaskOutbox] = field(default_factory=dict, compare=False)

    def open(self, plan: EpochPlan, partition: int) -> KafkaParticipant:
        outbox = self.outboxes.setdefault(partition, TaskOutbox())
        info: TaskInfo[object] = TaskInfo(
            partition=partition, task_attempt=0, ticket=self.ticket, outbox=outbox
        )
        bound = KafkaResource(cfg=self.cfg, layout=self.layout, task=info, formats=self.formats)
        return bound.open(plan, partition)


@dataclass(kw_only=True)
class KafkaWorld(CrashWorld[ArrowPartition]):
    """One sink on one output topic, with the producer strategy ``strategy``."""

    bootstrap: str
    topic: str
    strategy: str
    shape: str = FULL
    channels: BackChannels | None = None
    client_setups: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sink_id = f"crash-{uuid.uuid4().hex[:10]}"

    @functools.cached_property
    def connector(self) -> KafkaConnector:
        cfg = SinkConfig.create(
            bootstrap_servers=self.bootstrap,
            topic=self.topic,
            sink_id=self.sink_id,
            mode=self.mode.value,
            parallelism=self.parallelism,
            producer_strategy=self.strategy,
        )
        return KafkaConnector(cfg)

    # -- what the crash world needs --------------------------------------------------
    def open_log(self) -> EpochLog:
        return self.connector.open_epoch_log()

    def new_resource(self) -> KafkaResource:
        """A new driver: a new back channel (a new client generation), the resource."""
        self.channels = BackChannels([self.connector.back_channel()])
        return KafkaResource(cfg=self.connector.cfg, layout=RecordLayout(key=True))

    def rows_for(self, plan: EpochPlan, partition: int) -> ArrowPartition:
        batch = partition_batch(plan.epoch, plan.parallelism, partition, self.shape)
        return ArrowPartition([batch])

    def executor(self) -> Execute:  # type: ignore[override]
        """The write stage of the running driver: one run per call, bound to its ticket."""
        resource, channels = self.resource, self.channels
        if not isinstance(resource, KafkaResource) or channels is None:
            msg = "no driver is running: call start() first"
            raise RuntimeError(msg)

        def execute(plan: EpochPlan) -> Sequence[PartitionReport]:
            run = StageRun(plan=plan)
            (ticket,) = channels.tickets(run)
            bound = TaskBinding(cfg=resource.cfg, layout=resource.layout, ticket=ticket)
            reports = InProcessExecutor(
                bound, self.rows_for, task_hooks=self._task_hook, vote_hook=self._vote_hook
            )(plan)
            notes = [n for box in bound.outboxes.values() for n in box.notes]
            channels.observe(run, reports, notes, [(0, plan.parallelism)])
            self.client_setups.append(sum(b.new_clients for b in bound.outboxes.values()))
            return reports

        return execute

    # -- invariants ------------------------------------------------------------------
    def check_exactly_once(self, epochs: int) -> None:
        want = Counter(k.encode() for e in range(epochs) for k in epoch_keys(e, self.shape))
        got = values(read_committed(self.bootstrap, self.topic))
        assert got == want, f"lost {want - got}, duplicated {got - want}"
        assert lso_reaches_high_watermark(self.bootstrap, self.topic), "a transaction is open"
        markers = read_markers(self.bootstrap, self.sink_id, self.parallelism)
        assert {p: m.epoch if m else None for p, m in markers.items()} == dict.fromkeys(
            range(self.parallelism), epochs - 1
        ), markers
        self.check_log(epochs)
