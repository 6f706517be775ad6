"""The world of the model-based test: one sink under test, its query, its output.

A :class:`World` holds what one Hypothesis example works on: a fresh output topic and/or
table, a sink of one :class:`Kind`, the input directory a streaming query reads (one JSON
file per micro-batch, ``maxFilesPerTrigger=1``) and that query. Its methods are the
everyday actions the state machine draws; it reads the output back for the checks, with a
read_committed consumer and a plain ``SELECT``, independent of the sink's own code. Its
fault plan (empty until :meth:`World.arm`) is injected from :meth:`World.create` to
:meth:`World.close`.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from connectors.kafka import KafkaSink
from connectors.postgres import PostgresSink
from connectors.stage import CompositeSink
from connectors.testing import FaultPlan, inject_faults
from integration_tests.conftest import wait_for_topic
from integration_tests.kafka_sink._support import lso_reaches_high_watermark, read_committed

# Input schema of every example: a unique id per row and a key (all rows of a "one key"
# batch share it, so they land in one write partition). Rows with k = 'drop' are filtered
# out by the query, which makes a batch empty after the filter.
INPUT_SCHEMA = "id long, k string"
DROPPED_KEY = "drop"
# Seconds to wait for a "sleep" fault to be reached before stopping the query anyway (the
# wait ends earlier once the batch's epoch completed without reaching the fault's step).
FAULT_REACHED_TIMEOUT_S = 60.0
# Seconds a "sleep" fault holds the epoch, so that query.stop() lands while it runs.
STOP_HOLD_S = 2.0
# Seconds for admin requests (topic creation) on a busy machine.
ADMIN_TIMEOUT_S = 30.0
# How long one DROP SCHEMA waits for a lock (a stray task's prepared transaction holds
# one until rolled back), and for how long the drop is retried in all.
DROP_LOCK_TIMEOUT = "2s"
DROP_DEADLINE_S = 60.0


@dataclass(frozen=True)
class Servers:
    """Kafka and PostgreSQL of the model test; ``broker``/``postgres`` set when restartable."""

    bootstrap: str
    dsn: str
    broker: Any = None
    postgres: Any = None


@dataclass(frozen=True)
class Kind:
    """Which sink an example drives: Kafka, PostgreSQL (a protocol) or both, and the mode."""

    name: str
    kafka: bool
    protocol: str | None  # PostgreSQL commit protocol, None: no table
    mode: str

    @property
    def composite(self) -> bool:
        return self.kafka and self.protocol is not None


KINDS = (
    Kind("kafka-aligned", True, None, "aligned"),
    Kind("kafka-unaligned", True, None, "unaligned"),
    Kind("pg-two-phase-aligned", False, "two-phase", "aligned"),
    Kind("pg-two-phase-unaligned", False, "two-phase", "unaligned"),
    Kind("pg-idempotency-aligned", False, "idempotency-table", "aligned"),
    Kind("composite-aligned", True, "two-phase", "aligned"),
)
LONG_KINDS = (
    *KINDS,
    Kind("pg-idempotency-unaligned", False, "idempotency-table", "unaligned"),
    Kind("composite-unaligned", True, "two-phase", "unaligned"),
)


def _to_kafka(df: Any) -> Any:
    return df.selectExpr("k AS key", "to_json(named_struct('id', id, 'k', k)) AS value")


def _to_table(df: Any) -> Any:
    return df.select("id", "k")


@dataclass
class World:
    """One example's sink, query and output (module docstring)."""

    kind: Kind
    spark: Any
    servers: Servers
    root: Path
    name: str = field(default_factory=lambda: f"m{uuid.uuid4().hex[:10]}")
    topic: str | None = None
    sink: Any = None
    query: Any = None
    # Every sink object made, closed at tear-down: one dropped without close() (a rule of
    # the example) may live on in Spark's gateway, with its Kafka clients.
    made: list[Any] = field(default_factory=list)
    generation: int = 0
    files: int = 0  # files in the current input directory (= batches of this checkpoint)
    injected: ExitStack = field(default_factory=ExitStack)  # the fault plan, until close()

    # -- set-up ------------------------------------------------------------------------
    def create(self) -> None:
        """Create the output topic and/or table, the first sink and the input directory."""
        self.injected.enter_context(inject_faults(self.fault_plan))
        if self.kind.kafka:
            self.topic = f"{self.name}-out"
            admin = AdminClient({"bootstrap.servers": self.servers.bootstrap})
            admin.create_topics([NewTopic(self.topic, 2, -1)])[self.topic].result(ADMIN_TIMEOUT_S)
            wait_for_topic(admin, self.topic, 2)
        if self.kind.protocol is not None:
            with self._pg() as conn:
                conn.execute(f'CREATE SCHEMA "{self.name}"')
                conn.execute(f'CREATE TABLE "{self.name}".t (id bigint PRIMARY KEY, k text)')
        self.sink = self.make_sink()
        self._dirs().mkdir(parents=True)

    def _pg(self) -> Any:
        import psycopg

        return psycopg.connect(self.servers.dsn, autocommit=True, connect_timeout=30)

    @property
    def fault_plan(self) -> FaultPlan:
        return FaultPlan(str(self.root / "faults.json"))

    def make_sink(self, *, start_over: bool = False) -> Any:
        """A new sink object of the example's kind (same sink_id every time)."""
        sink = self._new_sink(start_over)
        self.made.append(sink)
        return sink

    def _new_sink(self, start_over: bool) -> Any:
        opts: dict[str, Any] = {
            "mode": self.kind.mode,
            "stage_retries": 0,
            "start_over": start_over,
        }
        if self.kind.composite:
            kafka = KafkaSink(
                self.servers.bootstrap, self.topic, sink_id=f"{self.name}-k", parallelism=1
            )
            table = self._table_sink(parallelism=1)
            return CompositeSink(
                [(kafka, _to_kafka), (table, _to_table)], sink_id=f"{self.name}-c", **opts
            )
        if self.kind.kafka:
            return KafkaSink(
                self.servers.bootstrap, self.topic, sink_id=f"{self.name}-k", parallelism=2, **opts
            )
        return self._table_sink(parallelism=2, **opts)

    def _table_sink(self, **opts: Any) -> PostgresSink:
        return PostgresSink(
            self.servers.dsn,
            "t",
            f"{self.name}-p",
            schema=self.name,
            control_schema=self.name,
            commit_protocol=self.kind.protocol,
            **opts,
        )

    def prepare(self, df: Any) -> Any:
        """The sink's input from the query's rows (the composite selects per member)."""
        df = df.where(f"k <> '{DROPPED_KEY}'")
        if self.kind.composite:
            return df
        return _to_kafka(df) if self.kind.kafka else _to_table(df)

    # -- the query ---------------------------------------------------------------------
    def _dirs(self, name: str = "in") -> Path:
        return self.root / f"g{self.generation}" / name

    def start_query(self) -> None:
        """Start (or restart) the streaming query on the current checkpoint."""
        stream = (
            self.spark.readStream.schema(INPUT_SCHEMA)
            .option("maxFilesPerTrigger", 1)
            .json(str(self._dirs()))
        )
        self.query = (
            self.prepare(stream)
            .writeStream.foreachBatch(self.sink)
            .option("checkpointLocation", str(self._dirs("checkpoint")))
            .queryName(f"{self.name}_{self.generation}")
            .start()
        )

    def stop_query(self) -> None:
        if self.query is not None:
            self.query.stop()
        self.query = None

    def run_pending(self) -> bool:
        """Process every file written so far; False if the query failed (it then stopped)."""
        try:
            self.query.processAllAvailable()
        except Exception:  # noqa: BLE001 - StreamingQueryException; the model checks the output
            self.query = None
            return False
        return True

    def write_batch(self, rows: list[tuple[int, str]]) -> int:
        """Write one input file (one micro-batch) atomically; return its batch index."""
        index = self.files
        final = self._dirs() / f"{index:05d}.json"
        tmp = self.root / f".{final.name}.tmp"
        tmp.write_text("".join(json.dumps({"id": i, "k": k}) + "\n" for i, k in rows))
        os.replace(tmp, final)
        stamp = time.time() + index  # strictly increasing modification times: file order
        os.utime(final, (stamp, stamp))
        self.files += 1
        return index

    def batch_frame(self, index: int) -> Any:
        """The rows of batch ``index`` of the current checkpoint, as the sink's input."""
        path = self._dirs() / f"{index:05d}.json"
        return self.prepare(self.spark.read.schema(INPUT_SCHEMA).json(str(path)))

    def start_over(self) -> None:
        """A new checkpoint and input directory, with a new sink object bound by start_over."""
        self.close_sink()
        self.generation += 1
        self.files = 0
        self._dirs().mkdir(parents=True)
        self.sink = self.make_sink(start_over=True)

    # -- faults ------------------------------------------------------------------------
    def arm(self, step: str, action: str, seconds: float = 0.0) -> str:
        """Arm one fault for the next epoch; return its id (see connectors.testing.faults)."""
        fault_id = f"f{uuid.uuid4().hex[:8]}"
        entry: dict[str, Any] = {"id": fault_id, "step": step, "action": action, "times": 1}
        if seconds:
            entry["seconds"] = seconds
        Path(self.fault_plan.path).write_text(json.dumps([entry]))
        return fault_id

    def disarm(self) -> None:
        Path(self.fault_plan.path).write_text("[]")

    def wait_fired(self, fault_id: str, index: int) -> bool:
        """Wait until the fault fired; False once it cannot fire in batch ``index``'s epoch.

        It cannot once the query ended, or once the query committed the batch of input file
        ``index`` without reaching the step (a task step in an epoch with no task of it, a
        decision a sink never logs): waiting out the timeout then changes nothing.
        """
        deadline = time.monotonic() + FAULT_REACHED_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.fault_plan.has_fired(fault_id):
                return True
            if self.query is None or not self.query.isActive:
                return False
            if self._committed_files() > index:
                return self.fault_plan.has_fired(fault_id)
            time.sleep(0.05)
        return False

    def _committed_files(self) -> int:
        """How many input files the current checkpoint's committed batches have read.

        One file per batch (``maxFilesPerTrigger=1``, files in order): the file source's
        offset of the last committed batch is the index of the last file it read.
        """
        checkpoint = self._dirs("checkpoint")
        commits = checkpoint / "commits"
        done = (
            [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.exists() else []
        )
        if not done:
            return 0
        offsets = (checkpoint / "offsets" / str(max(done))).read_text().strip().splitlines()
        return int(json.loads(offsets[-1])["logOffset"]) + 1

    # -- the output --------------------------------------------------------------------
    def outputs(self) -> dict[str, Counter[int]]:
        """Ids in each output (topic and/or table), counted."""
        out: dict[str, Counter[int]] = {}
        if self.kind.kafka:
            assert self.topic is not None
            recs = read_committed(self.servers.bootstrap, self.topic)
            out["topic"] = Counter(json.loads(r.value or b"null")["id"] for r in recs)
        if self.kind.protocol is not None:
            with self._pg() as conn:
                rows = conn.execute(f'SELECT id FROM "{self.name}".t').fetchall()
            out["table"] = Counter(int(r[0]) for r in rows)
        return out

    def leftovers(self) -> list[str]:
        """What an epoch that completed must not leave behind: open transactions."""
        found: list[str] = []
        if self.kind.kafka:
            assert self.topic is not None
            if not lso_reaches_high_watermark(self.servers.bootstrap, self.topic):
                found.append(f"an open transaction pins topic {self.topic}")
        if self.kind.protocol == "two-phase":
            with self._pg() as conn:
                gids = conn.execute(
                    "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE %s", (f"eos:{self.name}%",)
                ).fetchall()
            found += [f"prepared transaction {g[0]}" for g in gids]
        return found

    # -- tear-down ---------------------------------------------------------------------
    def close_sink(self) -> None:
        close = getattr(self.sink, "close", None)
        if close is not None:
            close()

    def close(self) -> None:
        """Stop the query, close every sink made, roll back leftovers and drop the schema."""
        try:
            self.stop_query()
        finally:
            self.injected.close()
            for sink in self.made:  # the current one too; close() is idempotent
                sink.close()
            self.made.clear()
        if self.kind.protocol is not None:
            self._drop_schema()

    def _drop_schema(self) -> None:
        """Roll back this world's prepared transactions and drop its schema.

        A task of the stopped query may still prepare a transaction after the query
        stopped (Spark does not wait for a Python worker to notice it was cancelled), and a
        prepared transaction holds its locks with no session: so the drop waits at most
        ``DROP_LOCK_TIMEOUT`` at a time and the rollback runs again, until
        ``DROP_DEADLINE_S``.
        """
        import psycopg

        deadline = time.monotonic() + DROP_DEADLINE_S
        with self._pg() as conn:
            conn.execute(f"SET lock_timeout = '{DROP_LOCK_TIMEOUT}'")
            while True:
                for (gid,) in conn.execute(
                    "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE %s", (f"eos:{self.name}%",)
                ).fetchall():
                    conn.execute(f"ROLLBACK PREPARED '{gid}'")
                try:
                    conn.execute(f'DROP SCHEMA "{self.name}" CASCADE')
                    return
                except psycopg.errors.LockNotAvailable:
                    if time.monotonic() > deadline:
                        raise
