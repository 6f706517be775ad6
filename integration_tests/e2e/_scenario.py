"""Shared set-up of the end-to-end chaos tests: topics, input, chunk files, app runs, checks.

Every query runs as its own Spark application in a subprocess (``connectors.demo.app``):
that gives task retries (``local[N,4]``) without touching the session-wide ``spark``
fixture, and lets a test kill the whole application for real.

A scenario runs on one cluster: a bootstrap address and the client settings every Kafka
client needs there (``client_config``, empty on the suite's plaintext broker, the SASL/TLS
settings of a secured one). Every client it makes, the app's, the checker's and ``eos``'s,
gets them.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from connectors.demo.app import AppProcess, PipelineConfig
from connectors.demo.app._chunks import write_chunks
from connectors.kafka import read_markers
from connectors.ops import main as eos_main
from connectors.verify import (
    CheckReport,
    Record,
    check_exactly_once,
    print_report,
    produce_input,
    read_committed_topic,
)
from integration_tests.support.secure_kafka import write_command_config
from txn import Marker

# Seconds one app run may take on a busy machine (JVM start + a few epochs + retries).
APP_RUN_TIMEOUT_S = 400.0
# Small sizes keep the suite fast: N records cut into chunks of CHUNK (one epoch each).
N_RECORDS = 400
CHUNK = 100
KEYS = 12
# Seconds to wait for a topic created by a test's own broker to show in the metadata.
TOPIC_READY_TIMEOUT_S = 30.0


@dataclass
class Scenario:
    """One end-to-end run: its topics, files and sink, and helpers to run and check it."""

    bootstrap: str
    tmp: Path
    input_topic: str
    output_topic: str
    sink_id: str
    inputs: list[Record]
    client_config: dict[str, str] = field(default_factory=dict, repr=False)
    producer_strategy: str = "pooled"  # the Kafka sink's (docs/kafka-sink.md)

    @classmethod
    def create(
        cls,
        bootstrap: str,
        tmp: Path,
        new_topic: Callable[..., str],
        *,
        n: int = N_RECORDS,
        client_config: dict[str, str] | None = None,
        producer_strategy: str = "pooled",
    ) -> Scenario:
        """Make the topics (with ``new_topic``, on the same cluster) and the input records.

        ``tmp`` (the scenario's files) is created if missing; ``producer_strategy``: the
        Kafka sink's in every config of the scenario.
        """
        tmp.mkdir(parents=True, exist_ok=True)
        shared = dict(client_config or {})
        inp = new_topic("e2e-in", partitions=2)
        out = new_topic("e2e-out", partitions=3)
        produce_input(bootstrap, inp, n, keys=KEYS, client_config=shared)
        inputs = sorted(
            read_committed_topic(bootstrap, inp, client_config=shared),
            key=lambda r: (r.partition, r.offset),
        )
        assert len(inputs) == n
        sink_id = f"e2e-{uuid.uuid4().hex[:10]}"
        return cls(bootstrap, tmp, inp, out, sink_id, inputs, shared, producer_strategy)

    @property
    def input_dir(self) -> Path:
        return self.tmp / "input"

    def stage(self, first: int = 0, last: int | None = None) -> int:
        """Write chunks ``first..last-1`` (all remaining by default) as input files."""
        chunks = [self.inputs[i : i + CHUNK] for i in range(0, len(self.inputs), CHUNK)]
        selected = chunks[first:last]
        return write_chunks(
            [r for c in selected for r in c], self.input_dir, CHUNK, first_chunk=first
        )

    def config(self, **overrides: Any) -> PipelineConfig:
        base = PipelineConfig(
            bootstrap=self.bootstrap,
            input_dir=str(self.input_dir),
            checkpoint=str(self.tmp / "checkpoint"),
            output_topic=self.output_topic,
            sink_id=self.sink_id,
            client_config=self.client_config,
            producer_strategy=self.producer_strategy,
        )
        return replace(base, **overrides)

    def fault_plan(self, faults: Sequence[dict[str, Any]], name: str = "faults") -> str:
        path = self.tmp / f"{name}.json"
        path.write_text(json.dumps(list(faults)))
        return str(path)

    def run(self, cfg: PipelineConfig, name: str, *, expect: int | None = 0) -> AppProcess:
        """Run one app to its exit; assert the exit code when ``expect`` is given."""
        app = AppProcess(cfg, self.tmp / "apps", name, allow_kill_app=True).start()
        code = app.wait(APP_RUN_TIMEOUT_S)
        if expect is not None:
            assert code == expect, (
                f"app {name} exited {code}, expected {expect}; errors:\n{app.failure_summary()}\n"
                f"(full log: {app.stderr_path})"
            )
        return app

    def check(self, **kwargs: Any) -> CheckReport:
        """Check the output topic; ``sink_id`` defaults to the scenario's."""
        kwargs.setdefault("sink_id", self.sink_id)
        report = check_exactly_once(
            self.bootstrap,
            input_topic=self.input_topic,
            output_topic=self.output_topic,
            client_config=self.client_config,
            **kwargs,
        )
        print_report(report)
        return report

    def markers(self, width: int) -> dict[int, Marker | None]:
        """The sink's marker of each write partition ``0 .. width-1``."""
        return read_markers(self.bootstrap, self.sink_id, width, client_config=self.client_config)

    def eos(self, *argv: str) -> tuple[int, dict[str, Any]]:
        """Run ``eos --json ARGV`` as an operator would; return the exit code and the document.

        The client settings go in a ``--command-config`` file (Java properties, as Kafka's
        own tools take them), never on the command line.
        """
        options = ["--bootstrap-servers", self.bootstrap, "--json"]
        if self.client_config:
            path = write_command_config(self.client_config, self.tmp / "command.properties")
            options += ["--command-config", str(path)]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = eos_main([*options, *argv])
        return code, json.loads(out.getvalue())


def wait_until_listed(admin: Any, name: str, partitions: int) -> None:
    """Block until topic ``name`` shows ``partitions`` partitions with leaders."""
    deadline = time.monotonic() + TOPIC_READY_TIMEOUT_S
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=name, timeout=5).topics.get(name)
        if (
            md is not None
            and md.error is None
            and len(md.partitions) == partitions
            and all(p.leader >= 0 for p in md.partitions.values())
        ):
            return
        time.sleep(0.1)
    raise TimeoutError(f"topic {name} not ready after {TOPIC_READY_TIMEOUT_S}s")


def topic_maker(bootstrap: str, settings: dict[str, str] | None = None) -> Callable[..., str]:
    """Return ``make_topic(prefix, partitions=1)``: a new, uniquely named topic, listed and led.

    ``settings``: the client settings the cluster needs (security), if any.
    """
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **(settings or {})})

    def make_topic(prefix: str, partitions: int = 1) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        admin.create_topics([NewTopic(name, partitions, -1)])[name].result(timeout=30)
        wait_until_listed(admin, name, partitions)
        return name

    return make_topic


def wait_until(condition: Callable[[], bool], timeout_s: float = APP_RUN_TIMEOUT_S) -> bool:
    """Poll ``condition`` until it holds or ``timeout_s`` passed; return whether it held."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def fired(plan_path: str, fault_id: str) -> int:
    """How many times fault ``fault_id`` of the plan at ``plan_path`` has fired."""
    return len(list(Path(plan_path).parent.glob(f"{Path(plan_path).name}.{fault_id}.*")))


def assert_exact(report: CheckReport) -> None:
    """Every invariant of docs/architecture.md, section 8."""
    assert report.epoch_log_checked, report.notes
    assert report.ok, [(a.kind.value, a.record_id, a.detail) for a in report.examples]
    assert report.committed_records == report.input_records
