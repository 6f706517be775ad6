"""Exactly-once verification: read a sink's input and output and list every violation.

``check_exactly_once`` checks the invariants of the architecture (section 8): nothing lost or
duplicated, no aborted data visible to ``read_committed``, per-key order kept, no transaction
left open, the epoch log agreeing with the markers, and no fenced (zombie) attempt committed.
"""

from connectors.verify._analysis import (
    Anomaly,
    AnomalyKind,
    CheckReport,
    analyze,
)
from connectors.verify._check import check_exactly_once, load_history, read_sink_markers
from connectors.verify._epochs import check_epoch_log
from connectors.verify._errors import ReadTimeoutError, RecordFormatError, VerifyError, WireError
from connectors.verify._input import produce_input
from connectors.verify._records import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    Record,
    RecordIdentity,
    end_offsets,
    json_identity,
    make_input_value,
    read_committed_topic,
    read_topic,
)
from connectors.verify._render import print_report, report_table
from connectors.verify._wire import BatchSpan, PartitionScan, scan_topic

__all__ = [
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "Anomaly",
    "AnomalyKind",
    "BatchSpan",
    "CheckReport",
    "PartitionScan",
    "ReadTimeoutError",
    "Record",
    "RecordFormatError",
    "RecordIdentity",
    "VerifyError",
    "WireError",
    "analyze",
    "check_epoch_log",
    "check_exactly_once",
    "end_offsets",
    "json_identity",
    "load_history",
    "make_input_value",
    "print_report",
    "produce_input",
    "read_committed_topic",
    "read_sink_markers",
    "read_topic",
    "report_table",
    "scan_topic",
]
