"""The Kafka sink's ``txn.Resource``: opens the participant of the guarantee per partition."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from connectors.kafka._formats import FormatPlan, formatted
from connectors.kafka._sink import _pool
from connectors.kafka._sink._bad_records import KafkaClassifier
from connectors.kafka._sink._config import SinkConfig
from connectors.kafka._sink._markers import read_markers
from connectors.kafka._sink._participant import KafkaParticipant, PlainKafkaParticipant
from connectors.kafka._sink._pooled import PooledPlain, PooledTransactional
from connectors.kafka._sink._producers import fence, lane_ids
from connectors.kafka._sink._reference import NewProducerPerTask
from connectors.kafka._sink._strategy import ProducerStrategy, TaskProducers
from connectors.kafka._sink._transactional import TransactionalKafkaParticipant
from connectors.kafka._sink._writer import RecordLayout
from connectors.stage import ArrowPartition, DeadLetterContext, TaskInfo
from connectors.stage._bad_records import screened
from txn import EpochPlan, Marker, Resource


@dataclass(frozen=True, kw_only=True)
class KafkaResource(Resource[ArrowPartition]):
    """Driver-side, picklable description of the sink's Kafka side.

    ``task``: set in the write task by :meth:`for_task` (with the back channel's ticket of
    the pooled strategy). ``formats``: the epoch's Schema Registry formats
    (``connectors.kafka._formats``), if any.
    """

    cfg: SinkConfig
    layout: RecordLayout
    task: TaskInfo[object] | None = None
    formats: FormatPlan | None = None
    reads_markers = True  # committed_markers reads the marker topic from the driver

    def for_task(self, task: TaskInfo[object]) -> KafkaResource:
        """Return this resource bound to the write task ``task``."""
        return replace(self, task=task)

    def producers(
        self, plan: EpochPlan, partition: int, pool: _pool.ClientPool = _pool.POOL
    ) -> TaskProducers:
        """Return the clients of ``partition``'s task under the sink's producer strategy.

        ``pool``: the pooled strategy's pool (this process's; tests play workers with more).
        """
        cfg = self.cfg
        if cfg.producer_strategy is ProducerStrategy.REFERENCE:
            return NewProducerPerTask(cfg, partition, self.task)
        if cfg.transactional:
            return PooledTransactional(cfg, plan, partition, self.task, pool)
        return PooledPlain(cfg, self.task, pool)

    def open(self, plan: EpochPlan, partition: int) -> KafkaParticipant:
        """Open the participant of the guarantee with the strategy's clients."""
        kind = TransactionalKafkaParticipant if self.cfg.transactional else PlainKafkaParticipant
        producers = self.producers(plan, partition)
        participant = kind(self.cfg, self.layout, plan, partition, producers=producers)
        if not self.cfg.screens_records:
            return formatted(participant, self.formats)  # type: ignore[no-any-return]
        # The classifier encodes the formatted columns itself (a misfit is a bad record).
        classifier = KafkaClassifier(self.cfg, self.layout, self.formats)
        context = DeadLetterContext(sink_id=self.cfg.sink_id, epoch=plan.epoch, partition=partition)
        return screened(participant, classifier, self.cfg, context)  # type: ignore[return-value]

    def fingerprint(self) -> str:
        """Digest of the options that decide where rows land (and the formats' schema ids)."""
        if self.formats is None:
            return self.cfg.fingerprint()
        return f"{self.cfg.fingerprint()[:8]}{self.formats.digest()[:8]}"

    def abort_lingering(self, partitions: Iterable[int]) -> None:
        """Fence every lane of each partition ``p``, aborting open transactions (start-up, shrink)."""
        if not self.cfg.transactional:
            return
        fence(self.cfg, lane_ids(self.cfg, partitions))

    def committed_markers(self, plan: EpochPlan) -> Mapping[int, Marker | None]:
        """Every write partition's committed marker, read from the driver (no fencing)."""
        cfg = self.cfg
        return read_markers(
            cfg.bootstrap_servers,
            cfg.sink_id,
            plan.parallelism,
            marker_topic=cfg.marker_topic,
            client_config=cfg.client_config,
        )
