"""Options of the generic write stage, validated at construction (no network I/O)."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from connectors._suggest import nearest_name
from connectors.stage._resume import RESUME_CHOICES
from txn import CommitMode, Guarantee, TxnCode, TxnError

_Config = TypeVar("_Config", bound="StageOptions")

# Vote channels of the aligned mode: a TCP vote server on the driver (fast), or Spark's
# BarrierTaskContext.allGather (no extra connection; its JVM loop costs about 1 s per epoch).
VOTE_CHANNELS = ("driver", "barrier")
DEFAULT_VOTE_CHANNEL = "driver"
# Re-runs of a failed write stage within one call: Spark aborts the job of a failed
# barrier stage instead of retrying it, and a re-run is safe (redo or skip by marker).
DEFAULT_STAGE_RETRIES = 2
# What a write task does with a record it cannot write (docs/bad-records.md).
BAD_RECORD_POLICIES = ("fail", "dead-letter", "skip")


def _positive_int_or_none(name: str, value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        msg = f"{name} must be a positive int or None (Spark's default), got {value!r}"
        raise TxnError(msg, code=TxnCode.CONFIG)


@dataclass(frozen=True, kw_only=True)
class StageOptions:
    """How the stage runs an epoch; every connector's config extends this class.

    A connector's config is a subclass adding its own fields (``connectors.kafka.SinkConfig``),
    so each option is defined once, here or there. Options:

    * ``guarantee`` / ``mode``: see :class:`txn.Guarantee` and :class:`txn.CommitMode` (the
      mode only matters for exactly-once);
    * ``parallelism``: write partitions per epoch (None: Spark's default parallelism);
    * ``stage_retries``: re-runs of a failed write stage within one call;
    * ``vote_channel``: how aligned votes are gathered (``"driver"`` or ``"barrier"``);
    * ``order_by``: columns that order the rows inside each write partition (and make the
      checksum cover the order), e.g. the input position, so per-key output order follows
      the input;
    * ``keep_partitioning``: write the micro-batch's partitions as they are (no routing
      shuffle): one write task per input partition. Only for an input whose partitioning
      is deterministic across replays (the ``kafka-rc`` source reading straight into the
      sink: a replayed batch reads the same offset ranges into the same partitions); the
      row checksum still detects a replay that differs on a committed partition. Aligned
      mode then needs a task slot per input partition;
    * ``start_over``: bind the sink to a new streaming query (a new checkpoint) even though
      its epoch log belongs to another one; the new query's batches become new epochs
      above the log's last one (see ``_binding``; refused while an epoch is in doubt);
    * ``checkpoint_location``: the streaming query's ``checkpointLocation``, the same
      string. The sink then reads the query's id from the checkpoint's ``metadata`` file
      (through Spark, so any file system Spark reads) for the query binding: needed under
      Spark Connect, where the id is not visible in the ``foreachBatch`` process; on a
      classic session it is checked against the running query's id (``_binding``);
    * ``resume``: ``"from-output"`` binds a new streaming query (a new checkpoint) to the
      sink only if its first batch starts right after the committed output (an epoch in
      doubt is settled first); see ``_resume`` and docs/operations.md, "Changing a query".
      Not together with ``start_over``;
    * ``on_bad_record``: what a write task does with a record the sink cannot write (a
      null value, an oversized record, an unknown op, a value the database rejects):
      ``"fail"`` (the default: the epoch is aborted), ``"dead-letter"`` (the record goes to
      the sink's dead-letter topic or table in the same transaction as the good rows) or
      ``"skip"`` (counted and logged with its reason); see ``_bad_records`` and
      docs/bad-records.md. A connector that cannot classify records refuses the last two;
    * ``max_bad_fraction``: with ``"dead-letter"`` or ``"skip"``, the largest fraction of a
      write partition's rows that may be bad (None: no limit); beyond it the epoch is
      aborted with :class:`connectors.stage.StageCode.BAD_RECORD_THRESHOLD` (a circuit breaker);

    At-most-once never re-runs any part of an epoch (``stage_retries`` does not apply, and
    a Spark task retry writes nothing): a failed epoch is lost, never duplicated.
    """

    guarantee: Guarantee = Guarantee.EXACTLY_ONCE
    mode: CommitMode = CommitMode.ALIGNED
    parallelism: int | None = None
    stage_retries: int = DEFAULT_STAGE_RETRIES
    vote_channel: str = DEFAULT_VOTE_CHANNEL
    order_by: tuple[str, ...] = ()
    keep_partitioning: bool = False
    start_over: bool = False
    checkpoint_location: str | None = None
    resume: str | None = None
    on_bad_record: str = "fail"
    max_bad_fraction: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "guarantee", Guarantee.parse(self.guarantee))
        object.__setattr__(self, "mode", CommitMode.parse(self.mode))
        _positive_int_or_none("parallelism", self.parallelism)
        retries = self.stage_retries
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            msg = f"stage_retries must be an int >= 0, got {retries!r}"
            raise TxnError(msg, code=TxnCode.CONFIG)
        if self.vote_channel not in VOTE_CHANNELS:
            msg = (
                f"vote_channel must be 'driver' (a vote server on the driver; executors "
                f"connect to it over TCP) or 'barrier' (Spark's allGather, about 1 s slower "
                f"per epoch), got {self.vote_channel!r}"
            )
            raise TxnError(msg, code=TxnCode.CONFIG)
        order_by = self.order_by
        if isinstance(order_by, str) or not all(isinstance(c, str) and c for c in order_by):
            msg = f"order_by must be a sequence of column names, e.g. ['offset'], got {order_by!r}"
            raise TxnError(msg, code=TxnCode.CONFIG)
        object.__setattr__(self, "order_by", tuple(order_by))
        object.__setattr__(self, "start_over", bool(self.start_over))
        object.__setattr__(self, "keep_partitioning", bool(self.keep_partitioning))
        location = self.checkpoint_location
        if location is not None:
            if isinstance(location, os.PathLike):
                location = os.fspath(location)
            if not isinstance(location, str) or not location.strip():
                msg = (
                    "checkpoint_location must be the query's checkpointLocation (a non-empty "
                    f"path or URI) or None, got {location!r}"
                )
                raise TxnError(msg, code=TxnCode.CONFIG)
            object.__setattr__(self, "checkpoint_location", location)
        if self.resume is not None and self.resume not in RESUME_CHOICES:
            msg = f"resume must be None or one of {list(RESUME_CHOICES)}, got {self.resume!r}"
            raise TxnError(msg, code=TxnCode.CONFIG)
        if self.resume is not None and self.start_over:
            msg = (
                "resume and start_over exclude each other: resume starts the new query right "
                "after the committed output, start_over wherever its startingOffsets say"
            )
            raise TxnError(msg, code=TxnCode.CONFIG)
        self._check_bad_records()

    def _check_bad_records(self) -> None:
        if self.on_bad_record not in BAD_RECORD_POLICIES:
            msg = (
                f"on_bad_record must be one of {list(BAD_RECORD_POLICIES)}, got "
                f"{self.on_bad_record!r}"
            )
            raise TxnError(msg, code=TxnCode.CONFIG)
        fraction = self.max_bad_fraction
        if fraction is None:
            return
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
            msg = f"max_bad_fraction must be a number from 0 to 1 or None, got {fraction!r}"
            raise TxnError(msg, code=TxnCode.CONFIG)
        if not 0.0 <= float(fraction) <= 1.0:
            msg = f"max_bad_fraction must be from 0 to 1 (a fraction of the rows), got {fraction!r}"
            raise TxnError(msg, code=TxnCode.CONFIG)
        if self.on_bad_record == "fail":
            msg = (
                "max_bad_fraction only applies with on_bad_record='dead-letter' or 'skip' "
                "(with 'fail' the first bad record aborts the epoch); remove it or set the policy"
            )
            raise TxnError(msg, code=TxnCode.CONFIG)
        object.__setattr__(self, "max_bad_fraction", float(fraction))

    @property
    def screens_records(self) -> bool:
        """True when write tasks classify records (``on_bad_record`` is not ``"fail"``)."""
        return self.on_bad_record != "fail"

    def routing_fingerprint(self) -> dict[str, object]:
        """Return the stage options that decide where rows land and how they are checksummed.

        Part of every connector's fingerprint: an epoch in doubt is never replayed with
        another routing.
        """
        return {"order_by": list(self.order_by), "keep_partitioning": self.keep_partitioning}

    @property
    def aligned(self) -> bool:
        """True when epochs gather every vote before any task commits."""
        return self.guarantee is Guarantee.EXACTLY_ONCE and self.mode is CommitMode.ALIGNED

    @property
    def effective_stage_retries(self) -> int:
        """Stage re-runs within one call: none for at-most-once (a re-run could duplicate)."""
        return 0 if self.guarantee is Guarantee.AT_MOST_ONCE else self.stage_retries

    @property
    def effective_mode(self) -> CommitMode:
        """The mode epochs are planned with (unaligned unless exactly-once)."""
        return self.mode if self.guarantee is Guarantee.EXACTLY_ONCE else CommitMode.UNALIGNED

    @property
    def warn_after_s(self) -> float | None:
        """Seconds an epoch may take before the stage warns (None: never); see subclasses."""
        return None


def build_config(
    cls: type[_Config], options: dict[str, Any], error: type[TxnError], sink: str
) -> _Config:
    """Construct ``cls`` (a sink's config dataclass) from raw options, every failure as ``error``.

    An unknown option, a stage option's ``TxnCode.CONFIG`` error and a missing required
    option all become ``error`` (the sink's own error class) with that code, naming the
    sink ``sink``.
    """
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(options) - known)
    if unknown:
        near = {u: n for u in unknown if (n := nearest_name(u, known)) is not None}
        hint = "".join(f"; did you mean {n!r} for {u!r}?" for u, n in near.items())
        msg = f"unknown {sink} option(s) {unknown}{hint}; the options are: {sorted(known)}"
        raise error(msg, code=TxnCode.CONFIG)
    try:
        return cls(**options)
    except TxnError as exc:  # a stage option: same message, the sink's type
        if exc.code is not TxnCode.CONFIG or isinstance(exc, error):
            raise
        raise error(exc.args[0], code=TxnCode.CONFIG) from None
    except TypeError as exc:  # a required option is missing
        msg = f"{exc}; see {cls.__name__} for the options"
        raise error(msg, code=TxnCode.CONFIG) from None
