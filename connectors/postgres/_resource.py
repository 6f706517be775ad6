"""The driver side of the PostgreSQL sink: the ``txn.Resource`` and the choice of protocol.

:func:`prepare_resource` runs once on the driver (network I/O): it creates the control
tables and picks the commit protocol: two-phase when the server allows prepared
transactions (``max_prepared_transactions`` > 0), else the idempotency table, logging
which one runs (``commit_protocol`` forces either; forcing two-phase on a server with 0
slots raises :class:`PostgresCode.TWO_PHASE_UNAVAILABLE`).

:class:`PostgresResource` is a frozen, picklable description shipped to the write tasks;
its coordinator-side methods finish prepared transactions by gid, idempotently:

* ``commit_prepared``: COMMIT PREPARED; if the gid is gone, the partition's marker must
  cover the epoch (it was committed before, e.g. by an earlier delivery whose reply was
  lost), else :class:`TxnCode.PREPARED_WORK_LOST` (never a silent loss: the coordinator
  keeps the commit decision and the replay redoes the partition);
* ``rollback_prepared``: ROLLBACK PREPARED; a missing gid is already rolled back;
* ``abort_lingering``: terminate live sessions of the listed partitions (zombie tasks of
  an earlier driver) and roll back their prepared transactions (no task runs then, and
  recovery has finished every decided epoch first). In idempotency-table mode a prepared
  transaction of the sink means a two-phase run left work in doubt: refused, with a hint.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from connectors.postgres import _markers, _twophase
from connectors.postgres._bad_records import PostgresClassifier, ensure_dead_letter_table
from connectors.postgres._classify import call_with_retry
from connectors.postgres._config import CommitProtocol, PostgresSinkConfig
from connectors.postgres._connect import connect, driver_connection
from connectors.postgres._control import ensure_control_tables
from connectors.postgres._errors import PostgresCode, PostgresSinkError
from connectors.postgres._input_offsets import ensure_offsets_table
from connectors.postgres._participant import (
    PostgresParticipant,
    partition_lock_key,
    terminate_holders,
)
from connectors.postgres._schema import TableLayout
from connectors.postgres._twophase import Gid
from connectors.stage import ArrowPartition, DeadLetterContext
from connectors.stage._bad_records import screened
from txn import EpochPlan, Marker, Participant, Resource, TxnCode

log = logging.getLogger("connectors.postgres")


def choose_two_phase(cfg: PostgresSinkConfig, slots: int) -> bool:
    """Whether epochs use PREPARE TRANSACTION, given the server's prepared-transaction slots."""
    if cfg.commit_protocol is CommitProtocol.TWO_PHASE:
        if slots == 0:
            msg = (
                "commit_protocol='two-phase' needs prepared transactions, but the server has "
                "max_prepared_transactions = 0; set it above the sink's parallelism and restart "
                "PostgreSQL, or use commit_protocol='idempotency-table' (or 'auto')"
            )
            raise PostgresSinkError(msg, code=PostgresCode.TWO_PHASE_UNAVAILABLE)
        return True
    if cfg.commit_protocol is CommitProtocol.IDEMPOTENCY_TABLE:
        return False
    return slots > 0


def prepare_resource(cfg: PostgresSinkConfig) -> PostgresResource:
    """Create the control tables, pick the commit protocol and log it (driver, network I/O)."""
    with connect(cfg, "coordinator", autocommit=True) as conn:
        ensure_control_tables(conn, cfg.control_schema)
        if cfg.dead_letter_table is not None:
            ensure_dead_letter_table(conn, cfg.control_schema, cfg.dead_letter_table)
        ensure_offsets_table(conn, cfg.control_schema)
        slots = _twophase.max_prepared_transactions(conn)
    two_phase = choose_two_phase(cfg, slots)
    if not cfg.transactional:
        mode = f"{cfg.guarantee.value}: local transactions committed by each task, no markers"
    elif two_phase:
        mode = "two-phase commit (PREPARE TRANSACTION, COMMIT PREPARED by the coordinator)"
    else:
        mode = "idempotency table (each task commits its local transaction with its marker)"
    log.info(
        "postgres sink %s: max_prepared_transactions=%d, commit_protocol=%s: running %s",
        cfg.sink_id,
        slots,
        cfg.commit_protocol.value,
        mode,
    )
    return PostgresResource(cfg=cfg, two_phase=two_phase)


@dataclass(frozen=True, kw_only=True)
class PostgresResource(Resource[ArrowPartition]):
    """Driver-side, picklable description of the sink (see the module docstring)."""

    cfg: PostgresSinkConfig
    two_phase: bool
    layout: TableLayout | None = None
    completable_by_coordinator: bool = field(init=False)

    def __post_init__(self) -> None:
        completable = self.two_phase and self.cfg.transactional
        object.__setattr__(self, "completable_by_coordinator", completable)

    def with_layout(self, layout: TableLayout) -> PostgresResource:
        """Return the same resource writing rows shaped by ``layout`` (per epoch)."""
        return dataclasses.replace(self, layout=layout)

    def open(self, plan: EpochPlan, partition: int) -> Participant[ArrowPartition]:
        """Open partition ``partition`` in the write task (fences older instances).

        With ``on_bad_record`` other than fail, behind the bad-record layer
        (``_bad_records``).
        """
        if self.layout is None:
            msg = "the resource has no layout; build it with with_layout(check_input(...))"
            raise PostgresSinkError(msg)
        participant = PostgresParticipant(self.cfg, self.layout, self.two_phase, plan, partition)
        context = DeadLetterContext(sink_id=self.cfg.sink_id, epoch=plan.epoch, partition=partition)
        return screened(participant, PostgresClassifier(self.layout), self.cfg, context)

    def fingerprint(self) -> str:
        """Digest of the options that decide what a partition's rows do to the table.

        With ``create_table`` / ``evolve_schema`` it covers the layout too (the columns
        written, their types, the key): the plan records it, and a replay of an epoch in
        doubt that would write other columns is refused (``txn.TxnCode.PLAN_MISMATCH``).
        """
        if self.layout is None or not self.cfg.follows_stream:
            return self.cfg.fingerprint()
        raw = f"{self.cfg.fingerprint()}:{self.layout.digest()}".encode()
        return hashlib.sha256(raw).hexdigest()[:16]

    def _gid(self, plan: EpochPlan, partition: int) -> Gid:
        return Gid(
            sink_id=self.cfg.sink_id, epoch=plan.epoch, attempt=plan.attempt, partition=partition
        )

    def commit_prepared(self, plan: EpochPlan, partition: int) -> None:
        """COMMIT PREPARED the partition's gid; a missing gid must be a committed one."""
        gid = self._gid(plan, partition)
        driver = driver_connection(self.cfg)

        def commit() -> None:
            try:
                conn = driver.get()
                if _twophase.commit_prepared(conn, gid):
                    return
                marker = _markers.read_marker(
                    conn, self.cfg.control_schema, self.cfg.sink_id, partition
                )
            except Exception:
                driver.discard()
                raise
            if marker is None or marker.epoch < plan.epoch:
                msg = (
                    f"epoch {plan.epoch} of sink {self.cfg.sink_id!r} was decided commit, but "
                    f"partition {partition} has neither its prepared transaction {gid} nor a "
                    f"marker of the epoch (marker: {marker}); the replay of the epoch redoes "
                    "the partition"
                )
                raise PostgresSinkError(msg, partition=partition, code=TxnCode.PREPARED_WORK_LOST)

        call_with_retry(f"COMMIT PREPARED {gid}", commit)

    def rollback_prepared(self, plan: EpochPlan, partition: int) -> None:
        """ROLLBACK PREPARED the partition's gid (a missing gid is already rolled back)."""
        gid = self._gid(plan, partition)
        driver = driver_connection(self.cfg)

        def rollback() -> None:
            try:
                _twophase.rollback_prepared(driver.get(), gid)
            except Exception:
                driver.discard()
                raise

        call_with_retry(f"ROLLBACK PREPARED {gid}", rollback)

    def committed_markers(self, plan: EpochPlan) -> Mapping[int, Marker | None]:
        """Every write partition's committed marker, read from the driver (settling, resume)."""
        driver = driver_connection(self.cfg)

        def read() -> dict[int, Marker]:
            try:
                return _markers.read_markers(
                    driver.get(), self.cfg.control_schema, self.cfg.sink_id
                )
            except Exception:
                driver.discard()
                raise

        found = call_with_retry("reading the markers", read)
        return {p: found.get(p) for p in range(plan.parallelism)}

    def prepared_partitions(self, plan: EpochPlan) -> Sequence[int]:
        """Partitions of ``plan`` (this attempt) whose transaction is still prepared."""
        found = call_with_retry(
            "listing prepared transactions",
            lambda: _twophase.list_prepared(driver_connection(self.cfg).get(), self.cfg.sink_id),
        )
        return sorted(
            g.partition for g in found if (g.epoch, g.attempt) == (plan.epoch, plan.attempt)
        )

    def abort_lingering(self, partitions: Iterable[int]) -> None:
        """Fence the listed partitions and roll back their prepared transactions."""
        if not self.cfg.transactional:
            return
        wanted = set(partitions)
        driver = driver_connection(self.cfg)

        def clean() -> None:
            try:
                conn = driver.get()
                for partition in sorted(wanted):
                    terminate_holders(conn, partition_lock_key(self.cfg.sink_id, partition))
                lingering = [
                    g
                    for g in _twophase.list_prepared(conn, self.cfg.sink_id)
                    if g.partition in wanted
                ]
                if lingering and not self.two_phase:
                    msg = (
                        f"sink {self.cfg.sink_id!r} runs in idempotency-table mode but has "
                        f"prepared transactions {[str(g) for g in lingering]} left by a two-phase "
                        "run; restart it with commit_protocol='two-phase' (or 'auto' on a server "
                        "with prepared transactions) until they are finished"
                    )
                    raise PostgresSinkError(msg, code=PostgresCode.LINGERING_PREPARED)
                for gid in lingering:
                    _twophase.rollback_prepared(conn, gid)
            except PostgresSinkError:
                raise
            except Exception:
                driver.discard()
                raise

        call_with_retry("aborting lingering work", clean)
