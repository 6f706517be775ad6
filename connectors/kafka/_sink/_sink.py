"""``KafkaSink``: the exactly-once Kafka sink for ``foreachBatch``, on the generic stage."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from connectors.kafka._client import (
    TOPIC_METADATA_WAIT_S,
    DurabilityRules,
    broker_config,
    connect_admin,
    ensure_topics,
    existing_topics,
    wait_for_topic,
)
from connectors.kafka._errors import KafkaCode, KafkaConnectorError
from connectors.kafka._formats import SinkFormats, for_tasks
from connectors.kafka._sink import _input
from connectors.kafka._sink._config import SinkConfig
from connectors.kafka._sink._epoch_log import KafkaEpochLog
from connectors.kafka._sink._resource import KafkaResource
from connectors.kafka._sink._reuse import ReusePolicy
from connectors.kafka._sink._strategy import ProducerStrategy
from connectors.stage import InputSpec, SinkConnector, TransactionalSink
from txn import EpochLog, FileEpochLog

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

log = logging.getLogger("connectors.kafka")


class KafkaConnector(SinkConnector):
    """The Kafka part of :class:`KafkaSink`: schema check, resource, epoch log, preflight."""

    classifies_records = True

    def __init__(self, cfg: SinkConfig) -> None:
        self.cfg = cfg
        self.formats = SinkFormats(cfg.key_format, cfg.value_format, cfg.schema_registry)

    @property
    def sink_id(self) -> str:
        """The sink's identity."""
        return self.cfg.sink_id

    @property
    def options(self) -> SinkConfig:
        """The validated configuration (stage options included)."""
        return self.cfg

    def check_input(self, schema: StructType) -> InputSpec:
        """Check Spark's Kafka sink columns (see ``_input``) and the formatted ones (no I/O)."""
        spec = _input.check_input(schema, self.cfg)
        return self.formats.check_input(schema, spec, self.cfg.topic, spec.layout.topic)

    def transform(self, df: DataFrame, spec: InputSpec) -> DataFrame:
        """Apply the changelog rules before routing."""
        return _input.transform(df, self.formats.unwrap(spec))

    def resource(self, spec: InputSpec) -> KafkaResource:
        """Return the Kafka resource for rows shaped by ``spec``.

        With ``key_format``/``value_format``: the schemas are resolved here, on the driver,
        before the epoch is logged (registry I/O, once per schema and sink object).
        """
        layout, formats = self.formats.resolve(spec)
        if formats is None:
            return KafkaResource(cfg=self.cfg, layout=layout)
        return KafkaResource(cfg=for_tasks(self.cfg), layout=layout, formats=formats)

    def back_channel(self) -> ReusePolicy | None:
        """Return the pooled strategy's reuse policy (exactly-once), else None: nothing to decide."""
        cfg = self.cfg
        if cfg.transactional and cfg.producer_strategy is ProducerStrategy.POOLED:
            return ReusePolicy()
        return None

    def open_epoch_log(self) -> EpochLog:
        """Open the file log if ``epoch_log`` is set, else the Kafka epoch log."""
        cfg = self.cfg
        if cfg.epoch_log is not None:
            return FileEpochLog(cfg.epoch_log, sink_id=cfg.sink_id)
        return self.epoch_log_for(cfg.sink_id)

    def epoch_log_for(self, sink_id: str) -> EpochLog:
        """Open the Kafka epoch log of ``sink_id`` in this sink's log topic."""
        return KafkaEpochLog(
            self.cfg.bootstrap_servers,
            sink_id,
            topic=self.cfg.epoch_log_topic,
            client_config=self.cfg.client_config,
            durability=self.cfg.state_topics,
        )

    def preflight(self) -> None:
        """Check the cluster (network I/O; runs lazily on the first write).

        1. the broker answers; 2. the output topic exists (created when
        ``create_topics=True``); the marker topic is created if missing (exactly-once,
        with ``state_topics``' replication and min ISR);
        3. ``transaction_timeout_ms`` is at most the broker's ``transaction.max.timeout.ms``;
        4. exactly-once: the output topic and the transaction state log satisfy
        ``DurabilityRules`` (each finding a warning, or ``KafkaCode.PREFLIGHT`` with
        ``strict_cluster_checks=True``).
        The dead-letter topic is created if missing (``on_bad_record="dead-letter"``).

        A topic missing from the metadata is looked for again for
        ``TOPIC_METADATA_WAIT_S`` (a restarted broker answers before it has loaded its
        topics); an unreachable broker is reported as such, not as a missing topic, within
        ``_connect.CONNECT_WAIT_S``.

        Raises:
            KafkaCode.CONNECT: no broker answered (the message names the address and the
                reason); KafkaCode.AUTHENTICATION: authentication failed (the message
                names the client_config settings to fix).
            KafkaCode.AUTHORIZATION: an ACL refused a topic creation or DescribeConfigs.
            KafkaCode.BROKER_UNAVAILABLE: the broker stopped answering afterwards.
            KafkaCode.TOPIC_MISSING: the output topic stayed absent.
            KafkaCode.PREFLIGHT: another problem, with what to fix.

        """
        cfg = self.cfg
        admin = connect_admin(cfg.cluster)  # KafkaCode.CONNECT: unreachable
        topics = existing_topics(admin)
        if cfg.topic is not None and cfg.topic not in topics:
            if cfg.create_topics:
                ensure_topics(cfg.cluster, [cfg.topic])
            elif not wait_for_topic(admin, cfg.topic, wait_s=TOPIC_METADATA_WAIT_S):
                msg = (
                    f"output topic {cfg.topic!r} does not exist (the broker answered, and "
                    f"fresh metadata did not show it for {TOPIC_METADATA_WAIT_S:.0f}s); "
                    "create it or pass create_topics=True"
                )
                raise KafkaConnectorError(msg, code=KafkaCode.TOPIC_MISSING)
        if cfg.dead_letter_topic is not None:
            ensure_topics(cfg.cluster, [cfg.dead_letter_topic])
        if cfg.transactional:
            ensure_topics(cfg.cluster, [cfg.marker_topic], durability=cfg.state_topics)
            self._check_timeout_limit()
            findings = DurabilityRules().check(admin, [] if cfg.topic is None else [cfg.topic])
            DurabilityRules.enforce(
                findings, strict=cfg.strict_cluster_checks, option="strict_cluster_checks"
            )

    def _check_timeout_limit(self) -> None:
        cfg = self.cfg
        raw = broker_config(cfg.cluster, "transaction.max.timeout.ms")
        if raw is None:
            log.warning("broker does not report transaction.max.timeout.ms; not checked")
            return
        if cfg.transaction_timeout_ms > int(raw):
            msg = (
                f"transaction_timeout_ms={cfg.transaction_timeout_ms} exceeds the broker's "
                f"transaction.max.timeout.ms={raw}; lower transaction_timeout_ms or raise "
                "the broker setting"
            )
            raise KafkaConnectorError(msg, code=KafkaCode.PREFLIGHT)


class KafkaSink(TransactionalSink):
    """Exactly-once (or at-least-once / at-most-once) Kafka sink for ``foreachBatch``.

    Usage::

        sink = KafkaSink("broker:9092", "out", sink_id="orders-eos")
        df.writeStream.foreachBatch(sink).option("checkpointLocation", ck).start()

    ``options`` are the fields of :class:`~connectors.kafka.SinkConfig` (guarantee, mode,
    parallelism, epoch_log, transaction_timeout_ms, client_config, producer_config,
    producer_strategy, changelog, order_by, ...), validated here without network I/O
    (:class:`TxnCode.CONFIG` names a bad one). One call ``sink(df, batch_id)`` runs
    epoch ``batch_id`` through the generic stage
    (:class:`connectors.stage.TransactionalSink`); the protocol: docs/architecture.md,
    the Kafka specifics (transactions, markers, producer strategies): docs/kafka-sink.md.
    """

    def __init__(
        self, bootstrap_servers: str, topic: str | None, sink_id: str, **options: Any
    ) -> None:
        cfg = SinkConfig.create(
            bootstrap_servers=bootstrap_servers, topic=topic, sink_id=sink_id, **options
        )
        super().__init__(KafkaConnector(cfg))

    @property
    def config(self) -> SinkConfig:
        """The validated configuration."""
        connector = self.connector
        assert isinstance(connector, KafkaConnector)  # noqa: S101 - set in __init__
        return connector.cfg

    def preflight(self) -> None:
        """Check the cluster now (it also runs lazily on the first write)."""
        self.connector.preflight()
