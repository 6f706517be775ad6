"""The Kafka connector: an exactly-once sink and a read_committed source, side by side.

Sink (``foreachBatch``; built on :mod:`connectors.stage`; docs/kafka-sink.md):

* :class:`KafkaSink` (exactly-once aligned / unaligned, at-least-once, at-most-once) and
  its validated :class:`SinkConfig`;
* :class:`KafkaEpochLog` - the default epoch log, in a compacted Kafka topic;
* :func:`read_markers` - the idempotency markers of a sink (for checkers and operators);
* ``client_config`` (an option of the sink, the epoch log, the markers, the checker and
  ``eos``): the librdkafka settings every Kafka client of the kit shares (security,
  ``client.id``); :func:`kafka_options` turns it into the source's ``kafka.*`` options;
* ``key_format`` / ``value_format`` (:class:`RecordFormat`): Avro, Protobuf or JSON Schema
  in the Confluent wire format through a Schema Registry; :func:`decode_avro`,
  :func:`decode_json_schema` and :func:`decode_protobuf` read such a column back (the
  source's ``value``);
* the error hierarchy rooted at :class:`KafkaConnectorError` (a ``txn.TxnError``).

Source (format ``kafka-rc``; docs/kafka-source.md): :func:`register`, its options and
errors rooted at :class:`KafkaConnectorError`. The source needs PySpark 4.2 or later, the sink
3.5 or later: on older PySpark this package imports, :func:`register` raises
:class:`KafkaCode.SPARK_VERSION` and :class:`KafkaRcDataSource` is imported on first use.

Both ask one error classifier, :func:`classify` (retry / abort / fatal, ``txn.ErrorAction``).
Fault injection for tests lives in :mod:`connectors.testing` (``FaultPlan``).
"""

from typing import TYPE_CHECKING

from connectors.kafka import _source
from connectors.kafka._client import (
    DEFAULT_EPOCH_LOG_TOPIC,
    DEFAULT_MARKER_TOPIC,
    classify,
    kafka_options,
)
from connectors.kafka._errors import KafkaCode, KafkaConnectorError
from connectors.kafka._formats import RecordFormat, decode_avro, decode_json_schema, decode_protobuf
from connectors.kafka._resume import resume_offsets
from connectors.kafka._sink._config import SinkConfig
from connectors.kafka._sink._epoch_log import KafkaEpochLog
from connectors.kafka._sink._markers import read_markers
from connectors.kafka._sink._sink import KafkaSink
from connectors.kafka._sink._strategy import PRODUCER_STRATEGIES
from connectors.kafka._source import EARLIEST, LATEST, MINIMUM_SPARK, SOURCE_NAME, register

__all__ = [
    "DEFAULT_EPOCH_LOG_TOPIC",
    "DEFAULT_MARKER_TOPIC",
    "EARLIEST",
    "LATEST",
    "MINIMUM_SPARK",
    "PRODUCER_STRATEGIES",
    "SOURCE_NAME",
    "classify",
    "decode_avro",
    "decode_json_schema",
    "decode_protobuf",
    "kafka_options",
    "read_markers",
    "register",
    "resume_offsets",
    "KafkaCode",
    "KafkaConnectorError",
    "KafkaEpochLog",
    "KafkaSink",
    "RecordFormat",
    "SinkConfig",
]

if _source.spark_has_source_api():  # PySpark 4.2 or later (connectors.kafka._source)
    __all__ += ["KafkaRcDataSource"]

# The source's Spark classes (KafkaRcDataSource): imported on first use (PySpark 4.2 or later).
if TYPE_CHECKING:
    from connectors.kafka._source import KafkaRcDataSource
else:
    __getattr__ = _source.spark_classes(__name__)
