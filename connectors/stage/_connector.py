"""What a connector supplies to become a ``foreachBatch`` sink on the generic stage.

A connector is a schema check, a :class:`txn.Resource` (its participants do the writing)
and an epoch log; everything else (routing, checksums, the barrier stage, votes, stage
retries, recovery, slot checks) is the stage's. :class:`SinkConnector` is the full
contract; :class:`SimpleConnector` builds one from the three pieces alone.

Call order on the driver (per :class:`~connectors.stage.TransactionalSink` call):
``check_input`` (every epoch, before anything is logged), ``preflight`` (first epoch),
``open_epoch_log`` (once per sink object), ``resource`` (for recovery and per epoch),
``before_plan`` (per epoch, after recovery, before the plan is logged), ``transform`` (per
epoch, before routing), ``close`` (when the sink is closed); ``back_channel`` once per sink
object. The resource is pickled to the write tasks; if it implements
:class:`~connectors.stage._task.TaskBound` it is bound to each task there, with the ticket of the
connector's back channel (``_backchannel``) if it has one.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from connectors.stage._backchannel import BackChannel
from connectors.stage._input import InputSpec
from connectors.stage._options import StageOptions
from connectors.stage._rows import ArrowPartition
from txn import EpochLog, FileEpochLog, Resource, TxnCode, TxnError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType


class SinkConnector(abc.ABC):
    """A connector's part of a sink built on the stage (see the module docstring).

    ``classifies_records``: the connector's participants screen bad records
    (``on_bad_record="dead-letter"``/``"skip"``, see ``_bad_records``); a connector that
    does not gets those options refused at construction.
    """

    classifies_records = False

    @property
    @abc.abstractmethod
    def sink_id(self) -> str:
        """The sink's identity: its epoch log, transactional ids, markers derive from it."""

    @property
    @abc.abstractmethod
    def options(self) -> StageOptions:
        """The validated options (a connector's config extends :class:`StageOptions`)."""

    @abc.abstractmethod
    def check_input(self, schema: StructType) -> InputSpec:
        """Check a Spark schema; raise :class:`connectors.stage.StageCode.INPUT_SCHEMA` naming the column."""

    @abc.abstractmethod
    def resource(self, spec: InputSpec) -> Resource[ArrowPartition]:
        """Return the picklable resource that writes rows shaped by ``spec``."""

    @abc.abstractmethod
    def open_epoch_log(self) -> EpochLog:
        """Open the sink's durable epoch log (called once per sink object)."""

    def epoch_log_for(self, sink_id: str) -> EpochLog:
        """Open an epoch log of this connector's kind for another sink id (a composite sink's).

        Raises:
            TxnCode.CONFIG: the connector keeps no log of its own kind; pass a file path.

        """
        msg = (
            f"{type(self).__name__} cannot hold the epoch log of sink {sink_id!r}; pass "
            "epoch_log= (a file path) to the composite sink"
        )
        raise TxnError(msg, code=TxnCode.CONFIG)

    def check_options(self) -> None:
        """Refuse stage options the connector cannot honour (at construction, no I/O).

        Raises:
            TxnCode.CONFIG: ``on_bad_record`` other than ``"fail"`` on a connector that does not
                classify records.

        """
        if self.options.screens_records and not self.classifies_records:
            msg = (
                f"{type(self).__name__} cannot classify bad records; on_bad_record="
                f"{self.options.on_bad_record!r} needs a sink that can (KafkaSink, "
                "PostgresSink): use on_bad_record='fail'"
            )
            raise TxnError(msg, code=TxnCode.CONFIG)

    def transform(self, df: DataFrame, spec: InputSpec) -> DataFrame:
        """Return ``df`` as the rows to route (e.g. drop changelog ``update_before`` rows)."""
        return df

    def before_plan(self, spec: InputSpec) -> None:  # noqa: B027 - optional hook
        """Make the target ready for rows shaped by ``spec`` (e.g. DDL); network I/O allowed.

        Called every epoch after recovery (no work of a dead attempt holds locks any more)
        and before the coordinator runs the epoch, so before its plan is logged. Must be
        idempotent: a replayed batch calls it again.
        """

    def preflight(self) -> None:  # noqa: B027 - optional hook
        """Check the external system before the first epoch (network I/O allowed)."""

    def back_channel(self) -> BackChannel[Any, Any] | None:
        """Return the driver side of the connector's back channel, or None (the default).

        A connector that keeps clients across epochs in the write tasks' processes decides
        there, on the driver, which may serve: the stage hands the channel's ticket to
        every task of a run and its tasks' notes back (``_backchannel``). Called once per
        sink object (a new object starts from nothing).
        """
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the connector keeps open on the driver (connections). Idempotent.

        Called when its sink is closed or collected and no other sink object of the same
        id holds the epoch log; a later epoch may open them again.
        """


class SimpleConnector(SinkConnector):
    """A connector from its pieces: a resource, a schema check and a file epoch log."""

    def __init__(
        self,
        sink_id: str,
        resource: Resource[ArrowPartition],
        check_input: Callable[[StructType], InputSpec],
        epoch_log: str | os.PathLike[str],
        options: StageOptions | None = None,
    ) -> None:
        self._sink_id = sink_id
        self._resource = resource
        self._check_input = check_input
        self._epoch_log = os.fspath(epoch_log)
        self._options = options or StageOptions()

    @property
    def sink_id(self) -> str:
        """The sink's identity."""
        return self._sink_id

    @property
    def options(self) -> StageOptions:
        """The stage options."""
        return self._options

    def check_input(self, schema: StructType) -> InputSpec:
        """Run the given schema check."""
        return self._check_input(schema)

    def resource(self, spec: InputSpec) -> Resource[ArrowPartition]:
        """Return the given resource (the same for every input shape)."""
        return self._resource

    def open_epoch_log(self) -> EpochLog:
        """Open the file epoch log."""
        return FileEpochLog(self._epoch_log, sink_id=self._sink_id)
