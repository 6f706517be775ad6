"""``python -m connectors.demo``: an exactly-once streaming job, optionally under chaos, verified.

Steps:

1. start an embedded minikafka broker (unless ``--bootstrap-servers`` names a cluster), with
   ``--secure`` one that takes only SASL_SSL clients (SCRAM-SHA-512, a password drawn for
   the run, certificates of a throwaway CA in the work directory: ``connectors.demo._broker``)
   and give every client of the run the matching settings; print the security in use; with
   ``--sink postgres`` or ``--sink kafka+postgres`` also a PostgreSQL server of its own
   (unless ``POSTGRES_DSN`` names one, see ``connectors.testing.postgres.postgres_dsn``);
2. create an input and an output topic (and the table) and produce ``--records`` input
   records, each with a unique id, a key from a small key space and a per-key sequence number;
3. with ``--source kafka`` (the default from PySpark 4.2, which the source needs) the
   query reads the input topic with the kit's ``read_committed`` source (``kafka-rc``),
   ``records / epochs`` offsets per micro-batch; with ``--source files`` (the default on
   older PySpark) the input is first written as chunk files, one micro-batch each (see
   ``connectors.demo.app._chunks.chunk_input``);
4. run the streaming query as a Spark application (local mode, or on the cluster that
   ``--master spark://host:port`` names) writing through ``KafkaSink``
   (``--sink kafka``, the default), ``PostgresSink`` (``--sink postgres``, with
   ``--write-mode`` and ``--commit-protocol``) or both in one epoch (``--sink
   kafka+postgres``) with exactly-once, ordered by input partition and offset; a progress
   bar follows the records committed;
5. with ``--chaos``: Python workers are killed mid-write, an exception hits a task between
   pre-commit and commit, and the whole application is SIGKILLed mid-run; each time the
   query is restarted from its checkpoint;
6. verify the output with ``connectors.verify.check_exactly_once`` (the topic) and
   ``check_table`` (the table) and print the reports; exit 1 if any invariant is violated.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from connectors.demo._broker import describe_security, start_broker
from connectors.demo._faults import chaos_faults
from connectors.demo._verify import verify_outputs
from connectors.demo.app import AppProcess, EpochLine, PipelineConfig
from connectors.demo.app._chunks import chunk_input
from connectors.demo.app._config import (
    POSTGRES_PROTOCOLS,
    POSTGRES_WRITE_MODES,
    SINK_BOTH,
    SINK_KAFKA,
    SINKS,
    SOURCE_FILES,
    SOURCE_KAFKA,
    SOURCES,
)
from connectors.demo.app._tables import create_table
from connectors.kafka import MINIMUM_SPARK, KafkaCode, KafkaConnectorError
from connectors.kafka._client import Cluster, admin_client, cluster_of
from connectors.kafka._source import require_source_api, spark_has_source_api
from connectors.ops._properties import PropertiesError, librdkafka_names, load_properties
from connectors.verify import produce_input

# Seconds to wait for topic creation on the broker.
ADMIN_TIMEOUT_S = 30.0
# Seconds one application run may take before the demo gives up on it.
APP_TIMEOUT_S = 900.0
# Restarts of the query the demo allows before it declares the run failed.
MAX_RESTARTS = 8
DEFAULT_RECORDS = 30_000
DEFAULT_EPOCHS = 15


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m connectors.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--records",
        type=int,
        default=DEFAULT_RECORDS,
        help=f"input records (default {DEFAULT_RECORDS:,})",
    )
    parser.add_argument(
        "--epochs",
        type=int,
        default=DEFAULT_EPOCHS,
        help=f"micro-batches the input is cut into (default {DEFAULT_EPOCHS})",
    )
    parser.add_argument(
        "--source",
        choices=SOURCES,
        default=None,
        help="read the input topic with the kafka-rc source (default; it needs PySpark "
        f"{MINIMUM_SPARK}+), or from Parquet chunk files written from it first (the default "
        "on older PySpark)",
    )
    parser.add_argument(
        "--chaos",
        action="store_true",
        help="kill workers, inject a failure, kill and restart the application",
    )
    parser.add_argument(
        "--bootstrap-servers",
        default=None,
        help="use this Kafka cluster instead of an embedded minikafka",
    )
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        default=None,
        help="librdkafka client settings every Kafka client of the demo uses (security, "
        "client.id) for --bootstrap-servers, in the Java properties format of Kafka's tools "
        "(as eos --command-config)",
    )
    parser.add_argument(
        "--secure",
        action="store_true",
        help="run the embedded broker with a SASL_SSL listener only (SCRAM-SHA-512, TLS with "
        "throwaway certificates in the work directory; needs the dev extra): every client "
        "of the demo gets the settings, any other is refused",
    )
    parser.add_argument(
        "--sink",
        choices=SINKS,
        default=SINK_KAFKA,
        help="write the output topic (default), a PostgreSQL table, or both in one epoch",
    )
    parser.add_argument(
        "--write-mode",
        choices=POSTGRES_WRITE_MODES,
        default="append",
        help="how the PostgreSQL sink writes the table (default append)",
    )
    parser.add_argument(
        "--commit-protocol",
        choices=POSTGRES_PROTOCOLS,
        default="auto",
        help="the PostgreSQL sink's commit protocol (default auto: two-phase "
        "when the server allows prepared transactions)",
    )
    parser.add_argument("--mode", choices=("aligned", "unaligned"), default="aligned")
    parser.add_argument("--parallelism", type=int, default=2, help="write tasks per epoch")
    parser.add_argument("--work-dir", default=None, help="keep files here (default: temporary)")
    parser.add_argument(
        "--master",
        default=None,
        help="Spark master URL, e.g. spark://host:7077 (default: local mode with a slot per "
        "write task); the executors must reach --bootstrap-servers, import this kit "
        "(docs/deploying.md) and, with --source files, read --work-dir",
    )
    args = parser.parse_args(argv)
    if args.records <= 0 or args.epochs <= 0 or args.parallelism <= 0:
        parser.error("--records, --epochs and --parallelism must be positive")
    if args.master is not None and args.master.startswith("local"):
        parser.error("--master names a cluster (spark://host:port); leave it out for local mode")
    if args.source is None:
        args.source = SOURCE_KAFKA if spark_has_source_api() else SOURCE_FILES
    elif args.source == SOURCE_KAFKA:
        try:
            require_source_api()
        except KafkaConnectorError as exc:
            parser.error(f"--source kafka: {exc}; or use --source files")
    if args.command_config is not None and args.bootstrap_servers is None:
        parser.error("--command-config goes with --bootstrap-servers (its cluster's settings)")
    if args.secure and args.bootstrap_servers is not None:
        parser.error(
            "--secure secures the embedded broker; for a cluster of yours give its client "
            "settings with --command-config"
        )
    try:
        args.client_config = (
            librdkafka_names(load_properties(args.command_config)) if args.command_config else {}
        )
        cluster_of(args.bootstrap_servers or "", args.client_config)  # refused: usage error
    except (PropertiesError, KafkaConnectorError) as exc:
        if isinstance(exc, KafkaConnectorError) and exc.code is not KafkaCode.CLIENT_CONFIG:
            raise
        parser.error(str(exc))
    return args


def _create_topics(cluster: Cluster, names: dict[str, int]) -> None:
    admin = admin_client(cluster)
    futures = admin.create_topics(
        [NewTopic(n, p, 1) for n, p in names.items()], request_timeout=ADMIN_TIMEOUT_S
    )
    for fut in futures.values():
        fut.result(timeout=ADMIN_TIMEOUT_S)


def main(argv: list[str] | None = None) -> int:
    """Run the demo; return 0 iff the output is exactly once."""
    args = _args(argv)
    console = Console()
    with ExitStack() as stack:
        work = (
            Path(args.work_dir)
            if args.work_dir
            else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="eos-demo-")))
        )
        work.mkdir(parents=True, exist_ok=True)
        bootstrap = args.bootstrap_servers
        if bootstrap is None:
            from connectors._extras import MissingExtraError

            try:
                broker = start_broker(stack, work, secure=args.secure)
            except MissingExtraError as exc:
                console.print(f"[red]cannot start a secured broker:[/] {exc}")
                return 2
            bootstrap, args.client_config = broker.bootstrap, broker.client_config
            console.print(f"[bold]minikafka[/] listening on {bootstrap}")
        console.print(f"[bold]Kafka security:[/] {describe_security(args.client_config)}")
        dsn = None
        if args.sink != SINK_KAFKA:
            from connectors._extras import MissingExtraError
            from connectors.testing.postgres import EmbeddedPostgresError, postgres_dsn

            try:
                with console.status("starting PostgreSQL"):
                    dsn = stack.enter_context(postgres_dsn())
            except (EmbeddedPostgresError, MissingExtraError) as exc:
                console.print(f"[red]cannot start a PostgreSQL server:[/] {exc}")
                return 2
            console.print(f"[bold]PostgreSQL[/] at {dsn}")
        return _run(args, console, bootstrap, dsn, work)
    return 1  # unreachable: the with-block returns


def _run(
    args: argparse.Namespace, console: Console, bootstrap: str, dsn: str | None, work: Path
) -> int:
    suffix = uuid.uuid4().hex[:8]
    input_topic, output_topic = f"demo-in-{suffix}", f"demo-out-{suffix}"
    sink_id, table = f"demo-{suffix}", f"demo_{suffix}"
    shared: dict[str, str] = args.client_config
    _create_topics(
        cluster_of(bootstrap, shared),
        {input_topic: 2, **({output_topic: 3} if args.sink != "postgres" else {})},
    )
    if dsn is not None:
        create_table(dsn, table, write_mode=args.write_mode)
        console.print(
            f"table: public.{table} ({args.write_mode}), commit protocol {args.commit_protocol}"
        )
    with _progress(console) as progress:
        task = progress.add_task("producing input", total=args.records)
        produce_input(
            bootstrap,
            input_topic,
            args.records,
            on_progress=lambda n: progress.update(task, completed=n),
            client_config=shared,
        )
    chunk = -(-args.records // args.epochs)
    if args.source == SOURCE_FILES:
        epochs = chunk_input(bootstrap, input_topic, work / "input", chunk, client_config=shared)
        console.print(
            f"input: {args.records:,} records in {input_topic}, cut into {epochs} "
            f"micro-batches of up to {chunk:,}"
        )
    else:
        # The input is produced without transactions: one offset per record, no markers.
        epochs = -(-args.records // chunk)
        console.print(
            f"input: {args.records:,} records in {input_topic}, read by the kafka-rc "
            f"source in about {epochs} micro-batches of up to {chunk:,} offsets"
        )
    faults = work / "faults.json"
    faults.write_text(json.dumps(chaos_faults(epochs, args.parallelism) if args.chaos else []))
    # Aligned epochs run every write task at once: P per sink, both sinks for kafka+postgres.
    slots = args.parallelism * (2 if args.sink == SINK_BOTH else 1)
    if args.master:
        console.print(
            f"Spark master: {args.master} (aligned mode needs {slots} free task slots there)"
        )
    cfg = PipelineConfig(
        bootstrap=bootstrap,
        input_dir=str(work / "input"),
        checkpoint=str(work / "checkpoint"),
        output_topic=output_topic,
        sink_id=sink_id,
        mode=args.mode,
        parallelism=args.parallelism,
        fault_plan=str(faults) if args.chaos else None,
        source=args.source,
        input_topic=input_topic,
        max_offsets_per_trigger=chunk,
        master=args.master or f"local[{max(2, slots)},4]",
        sink=args.sink,
        postgres_dsn=dsn,
        postgres_table=table if dsn else None,
        postgres_write_mode=args.write_mode,
        postgres_protocol=args.commit_protocol,
        client_config=shared,
    )
    if not _run_to_end(cfg, console, work, args.records, epochs, chaos=args.chaos):
        return 1
    return 0 if verify_outputs(cfg, console) else 1


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )


def _epochs_reached(epoch: int) -> Callable[[AppProcess], bool]:
    def reached(app: AppProcess) -> bool:
        return any(line.epoch >= epoch for line in app.epochs)

    return reached


def _run_to_end(
    cfg: PipelineConfig, console: Console, work: Path, records: int, epochs: int, *, chaos: bool
) -> bool:
    committed: dict[int, int] = {}
    kill_after = epochs // 2 if chaos else None
    resumed = [True]  # False from a restart until its first epoch is reported
    with _progress(console) as progress:
        task = progress.add_task("records committed", total=records)

        def on_epoch(line: EpochLine) -> None:
            if line.committed and not line.skipped:
                committed[line.epoch] = line.rows
            progress.update(task, completed=sum(committed.values()))
            if not resumed[0]:
                resumed[0] = True
                how = (
                    "already committed before the stop: skipped"
                    if line.skipped
                    else f"{line.rows:,} rows written"
                )
                progress.console.print(
                    f"[dim]restart resumed from the checkpoint at epoch {line.epoch} ({how})[/]"
                )

        for run in range(MAX_RESTARTS + 1):
            resumed[0] = run == 0
            app = AppProcess(cfg, work / "apps", name=f"run{run}").start(on_epoch)
            if (
                kill_after is not None
                and app.wait_for(_epochs_reached(kill_after), APP_TIMEOUT_S)
                and not app.done
            ):
                app.kill()
                progress.console.print(
                    f"[yellow]chaos:[/] killed the whole application "
                    f"after epoch {app.epochs[-1].epoch}; restarting"
                )
                kill_after = None
                continue
            code = app.wait(APP_TIMEOUT_S)
            if code == 0 and app.done:
                return True
            progress.console.print(
                f"[yellow]query stopped (exit {code}); restarting from "
                f"the checkpoint[/]\n[dim]{app.short_failure()}[/]"
            )
    console.print(f"[red]the query did not finish after {MAX_RESTARTS} restarts[/]")
    return False


if __name__ == "__main__":
    sys.exit(main())
