"""``check_exactly_once``: read everything the check needs from Kafka, then analyze it.

Steps:

1. end offsets of the output: last stable offsets (ListOffsets, ``read_committed``) and high
   watermarks (``read_uncommitted``);
2. read the input (unless its records are given: an expected set, ``connectors.verify``'s
   ``expected_records``), the output and the dead-letter topic if any with
   ``read_committed`` consumers up to the end by position, and the output again with
   ``read_uncommitted``;
3. scan the raw output log (Fetch v4) for committed, aborted and open transactional batches;
4. load the sink's epoch log and its idempotency markers and compare them;
5. :func:`connectors.verify._analysis.analyze` lists the anomalies.

Nothing is written to Kafka; the consumers use throw-away group ids and never commit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from connectors.kafka import DEFAULT_EPOCH_LOG_TOPIC, DEFAULT_MARKER_TOPIC
from connectors.kafka._client import ClientConfig, cluster_of
from connectors.verify._analysis import Anomaly, CheckReport, analyze
from connectors.verify._epochs import (
    HistoryLike,
    MarkerLike,
    check_epoch_log,
    deferred_epoch,
    open_history,
)
from connectors.verify._records import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    IdentityFn,
    Record,
    end_offsets,
    json_identity,
    read_topic,
)
from connectors.verify._wire import scan_topic

Progress = Callable[[str], None]


def check_exactly_once(
    bootstrap: str,
    *,
    input_topic: str | None = None,
    output_topic: str,
    sink_id: str,
    inputs: Sequence[Record] | None = None,
    dead_letter_topic: str | None = None,
    parallelism: int | None = None,
    key_fn: IdentityFn = json_identity,
    epoch_log: str | HistoryLike | None = None,
    epoch_log_topic: str = DEFAULT_EPOCH_LOG_TOPIC,
    marker_topic: str = DEFAULT_MARKER_TOPIC,
    allow_in_doubt: bool = False,
    verify_epoch_log: bool = True,
    progress: Progress | None = None,
    client_config: ClientConfig = None,
) -> CheckReport:
    """Check the exactly-once invariants of ``output_topic`` against ``input_topic``.

    Args:
        bootstrap: Kafka bootstrap address.
        input_topic: topic the query read; every record must carry a unique id.
        output_topic: topic the sink wrote.
        sink_id: the sink's id (names its markers and epoch log records).
        inputs: the input records instead of ``input_topic`` (e.g. ``expected_records``
            of the ids a rate source or a table produced, with ``with_expected(key_fn)``).
        dead_letter_topic: the sink's dead-letter topic: every input record must be in
            the output or there, once, never in both.
        parallelism: write partitions whose markers to read; default: the largest
            parallelism the epoch log ever planned.
        key_fn: maps a record to its id and ordering key (default: JSON ``id``/``key``;
            :func:`~connectors.verify.record_identity` builds one from a field
            path or a function for each).
        epoch_log: a ``FileEpochLog`` path, an already loaded history, or ``None`` for the
            sink's Kafka epoch log in ``epoch_log_topic``.
        epoch_log_topic: compacted topic of the Kafka epoch log (the sink's
            ``epoch_log_topic`` option).
        marker_topic: the topic the sink's markers commit offsets to (its ``marker_topic``
            option).
        allow_in_doubt: do not report epochs planned but never completed.
        verify_epoch_log: ``False`` skips step 4 (for outputs not written by ``KafkaSink``);
            the report then says ``epoch_log_checked=False``.
        progress: optional callback told about each step (for progress displays).
        client_config: the librdkafka settings every client of the check shares (the
            sink's ``client_config`` option: security, ``client.id``); the raw scan
            honours them too (TLS, SASL PLAIN / SCRAM).

    Returns:
        The report; ``report.ok`` is true iff no anomaly was found.

    Raises:
        ValueError: neither ``inputs`` nor ``input_topic`` is given.

    """
    say = progress or (lambda _step: None)
    shared = cluster_of(bootstrap, client_config).config  # KafkaCode.CLIENT_CONFIG before any I/O
    if inputs is None and input_topic is None:
        msg = "pass the input records (inputs=...) or the topic to read them from (input_topic)"
        raise ValueError(msg)
    say("end offsets")
    committed_ends = end_offsets(bootstrap, output_topic, READ_COMMITTED, client_config=shared)
    if inputs is None:
        assert input_topic is not None  # noqa: S101 - checked above
        say("reading input (read_committed)")
        inputs = read_topic(bootstrap, input_topic, isolation=READ_COMMITTED, client_config=shared)
    dead_letters: list[Record] = []
    if dead_letter_topic is not None:
        say("reading the dead letters (read_committed)")
        dead_letters = read_topic(bootstrap, dead_letter_topic, client_config=shared)
    say("reading output (read_committed)")
    committed = read_topic(
        bootstrap,
        output_topic,
        isolation=READ_COMMITTED,
        ends=committed_ends,
        client_config=shared,
    )
    say("reading output (read_uncommitted)")
    uncommitted = read_topic(
        bootstrap, output_topic, isolation=READ_UNCOMMITTED, client_config=shared
    )
    say("scanning raw batches")
    scans = scan_topic(bootstrap, output_topic, client_config=shared)
    extra: list[Anomaly] = []
    notes = ["epoch log not checked (disabled by the caller)"]
    checked, last = False, None
    if verify_epoch_log:
        say("epoch log and markers")
        extra, notes, checked, last = _epoch_checks(
            (bootstrap, shared),
            sink_id,
            parallelism,
            (epoch_log, epoch_log_topic, marker_topic),
            allow_in_doubt,
        )
    say("analyzing")
    return analyze(
        inputs,
        committed,
        uncommitted,
        scans=scans,
        committed_ends=committed_ends,
        identity=key_fn,
        extra=extra,
        notes=notes,
        epoch_log_checked=checked,
        last_committed_epoch=last,
        dead_letters=dead_letters,
    )


def _epoch_checks(
    where: tuple[str, ClientConfig],
    sink_id: str,
    parallelism: int | None,
    names: tuple[str | HistoryLike | None, str, str],
    allow_in_doubt: bool,
) -> tuple[list[Anomaly], list[str], bool, int | None]:
    bootstrap, shared = where
    epoch_log, epoch_log_topic, marker_topic = names
    history = load_history(bootstrap, sink_id, epoch_log, epoch_log_topic, client_config=shared)
    width = parallelism if parallelism is not None else history.max_parallelism()
    markers = read_sink_markers(
        bootstrap, sink_id, width, marker_topic=marker_topic, client_config=shared
    )
    anomalies = check_epoch_log(history, markers, allow_in_doubt=allow_in_doubt)
    deferred = deferred_epoch(history, markers)
    last = history.last_committed_epoch() if deferred is None else deferred
    note = (
        f"epoch log: last committed epoch {last}, markers of {width} write partitions "
        f"in {marker_topic!r}"
    )
    notes = [note]
    if deferred is not None:
        notes.append(f"epoch {deferred}: committed by its markers, its completion deferred")
    return anomalies, notes, True, last


def load_history(
    bootstrap: str,
    sink_id: str,
    epoch_log: str | HistoryLike | None,
    epoch_log_topic: str,
    *,
    client_config: ClientConfig = None,
) -> HistoryLike:
    """Load the sink's epoch history from a file path, the Kafka log, or return it as given."""

    def kafka_log() -> Any:
        from connectors.kafka import KafkaEpochLog

        return KafkaEpochLog(bootstrap, sink_id, topic=epoch_log_topic, client_config=client_config)

    return open_history(epoch_log, sink_id, kafka_log)


def read_sink_markers(
    bootstrap: str,
    sink_id: str,
    parallelism: int,
    *,
    marker_topic: str = DEFAULT_MARKER_TOPIC,
    client_config: ClientConfig = None,
) -> Mapping[int, MarkerLike | None]:
    """Read the sink's idempotency markers of write partitions ``0..parallelism-1``."""
    from connectors.kafka import read_markers

    markers: Mapping[int, MarkerLike | None] = read_markers(
        bootstrap, sink_id, parallelism, marker_topic=marker_topic, client_config=client_config
    )
    return markers
