"""Exactly-once verification: read a sink's input and output and list every violation.

``check_exactly_once`` checks the invariants of docs/architecture.md (section 8) on a topic:
nothing lost or duplicated, no aborted data visible to ``read_committed``, per-key order
kept, no transaction left open, the epoch log agreeing with the markers, and no fenced
(zombie) attempt committed. Records are identified by :func:`record_identity` (a JSON
field path or a function, for the id and for the ordering key). ``check_table`` checks a
PostgreSQL table: every input record once (append) or the last change of every key
(upsert, changelog), no prepared transaction of the sink left, the epoch log agreeing with
the idempotency table. ``check_lake_table`` checks a Delta Lake or Iceberg table a table sink
wrote: every input record once, no vote record left in the staging area, the epoch log
agreeing with the epochs the table records. An input that is not a Kafka topic (a
``rate`` source, files, a table) is checked against an expected set of ids
(:func:`expected_records` from :func:`id_range`, :func:`ids_in_file` or
:func:`ids_of_query`, identified through :func:`with_expected`); a dead-letter topic is
counted beside the output (every input record once in one of them).

Part of the product: the shipped ``eos verify`` (``connectors.ops``) runs it, and users call
it from their own tests.
"""

from connectors.verify._analysis import (
    TOPIC_KINDS,
    Anomaly,
    AnomalyKind,
    CheckReport,
    analyze,
)
from connectors.verify._check import check_exactly_once, load_history, read_sink_markers
from connectors.verify._epochs import HistoryLike, check_epoch_log, member_history
from connectors.verify._errors import (
    IdentityOptionError,
    ReadTimeoutError,
    RecordFormatError,
    VerifyError,
    WireError,
)
from connectors.verify._expected import (
    EXPECTED,
    expected_records,
    id_range,
    ids_in_file,
    ids_of_query,
    with_expected,
)
from connectors.verify._identity import (
    FieldPath,
    kafka_key,
    load_callable,
    record_identity,
)
from connectors.verify._input import produce_input
from connectors.verify._lake import check_lake_table
from connectors.verify._records import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    IdentityFn,
    Record,
    RecordIdentity,
    end_offsets,
    json_identity,
    make_input_value,
    read_committed_topic,
    read_topic,
)
from connectors.verify._render import print_report, report_table
from connectors.verify._table import (
    TABLE_KINDS,
    TableReport,
    TableRow,
    analyze_table,
)
from connectors.verify._table_check import check_table
from connectors.verify._wire import BatchSpan, PartitionScan, scan_topic

__all__ = [
    "EXPECTED",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "TABLE_KINDS",
    "TOPIC_KINDS",
    "Anomaly",
    "AnomalyKind",
    "BatchSpan",
    "CheckReport",
    "FieldPath",
    "HistoryLike",
    "IdentityFn",
    "IdentityOptionError",
    "PartitionScan",
    "ReadTimeoutError",
    "Record",
    "RecordFormatError",
    "RecordIdentity",
    "TableReport",
    "TableRow",
    "VerifyError",
    "WireError",
    "analyze",
    "analyze_table",
    "check_epoch_log",
    "check_exactly_once",
    "check_lake_table",
    "check_table",
    "end_offsets",
    "expected_records",
    "id_range",
    "ids_in_file",
    "ids_of_query",
    "json_identity",
    "kafka_key",
    "load_callable",
    "load_history",
    "make_input_value",
    "member_history",
    "print_report",
    "produce_input",
    "read_committed_topic",
    "read_sink_markers",
    "read_topic",
    "record_identity",
    "report_table",
    "scan_topic",
    "with_expected",
]
