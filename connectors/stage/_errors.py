"""The error of the generic Spark write stage, shared by every connector built on it.

One class, :class:`StageError` (a :class:`txn.TxnError`), with a code per case
(:class:`StageCode`); whether running the write stage again can help is the code's
``retry_stage``. A connector raises the input cases with its own class and these codes
(a Kafka sink's missing column is a ``KafkaConnectorError`` with ``StageCode.INPUT_SCHEMA``
and ``column`` set), so a caller tests ``err.code`` whatever the connector::

    INPUT                   the DataFrame cannot be written; ``column`` names the column
    INPUT_SCHEMA            a column is missing or mistyped (driver, nothing written)
    RECORD                  one record cannot be written (task; epoch aborted)
    BAD_RECORD_THRESHOLD    more bad records than max_bad_fraction allows
    INSUFFICIENT_SLOTS      aligned mode: the epoch's tasks do not fit at once
    STAGE_PARTITIONING      Spark ran another number of write tasks than planned
    QUERY_MISMATCH          the epoch log belongs to another query (checkpoint)
    CHECKPOINT              checkpoint_location names no checkpoint of this query
    RESUME_INPUT_MISMATCH   resume: the query reads other topics/partitions/offsets (named)
    NOT_KAFKA_INPUT         resume: the committed input was not (only) Kafka
    SINK_STOPPED            a graceful stop was requested; the batch was not written
    SINK_IN_USE             another sink object of this process, whose query runs, holds the log
    SPARK_CONNECT           what Spark Connect cannot give (binding, slot count)
    VOTE_CHANNEL            the driver vote channel failed; the task aborts
    VOTE_TIMEOUT            not every task voted in time
    VOTE_REJECTED           the vote server refused a vote
"""

from __future__ import annotations

from typing import ClassVar

from txn import ErrorCode, TxnError


class StageCode(ErrorCode):
    """The cases of the write stage (see the module docstring)."""

    ERROR = ("stage", True)
    INPUT = ("input", False)
    INPUT_SCHEMA = ("input-schema", False)
    RECORD = ("record", False)
    BAD_RECORD_THRESHOLD = ("bad-record-threshold", False)
    INSUFFICIENT_SLOTS = ("insufficient-slots", False)
    STAGE_PARTITIONING = ("stage-partitioning", True)
    QUERY_MISMATCH = ("query-mismatch", False)
    CHECKPOINT = ("checkpoint", False)
    RESUME_INPUT_MISMATCH = ("resume-input-mismatch", False)
    NOT_KAFKA_INPUT = ("not-kafka-input", False)
    SINK_STOPPED = ("sink-stopped", False)
    SINK_IN_USE = ("sink-in-use", False)
    SPARK_CONNECT = ("spark-connect", False)
    VOTE_CHANNEL = ("vote-channel", True)
    VOTE_TIMEOUT = ("vote-timeout", True)
    VOTE_REJECTED = ("vote-rejected", True)


# The cases of a DataFrame the sink cannot write (``column`` names the column).
INPUT_CODES = frozenset(
    {StageCode.INPUT, StageCode.INPUT_SCHEMA, StageCode.RECORD, StageCode.BAD_RECORD_THRESHOLD}
)
# The cases of a failed vote round.
VOTE_CODES = frozenset({StageCode.VOTE_CHANNEL, StageCode.VOTE_TIMEOUT, StageCode.VOTE_REJECTED})


class StageError(TxnError):
    """The error of :mod:`connectors.stage`; ``code`` is a :class:`StageCode`."""

    default_code: ClassVar[ErrorCode] = StageCode.ERROR
