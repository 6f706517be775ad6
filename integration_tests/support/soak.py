"""Soak run: ``python -m integration_tests.support.soak [--records 1000000] [--faults 20]``.

A longer randomized chaos run of the exactly-once pipeline (not part of ``make test``):

1. start minikafka with a data dir (or use ``--bootstrap-servers`` / KAFKA_BOOTSTRAP_SERVERS);
2. produce ``--records`` input records and cut them into ``--epochs`` chunk files;
3. draw ``--faults`` faults at random (seeded) over every fault type: task-side kill/raise at
   each step of the write protocol, whole-app SIGKILLs from inside a write task at each
   step (``kill_app``), driver-side kills at each coordinator step, whole-app SIGKILLs
   from outside, and a new write parallelism on each restart;
4. run the query as Spark applications, restarting from the checkpoint after every failure,
   until every epoch is written (rich progress bar on records committed);
5. check every invariant with ``connectors.verify.check_exactly_once`` and print a summary
   table: records checked, faults injected by type, anomalies by type. Exit 1 on any anomaly.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from connectors.demo.app import AppProcess, EpochLine, PipelineConfig
from connectors.demo.app._chunks import chunk_input
from connectors.kafka._client import _clients
from connectors.stage._hooks import DRIVER_STEPS, TASK_STEPS
from connectors.verify import TOPIC_KINDS, check_exactly_once, print_report, produce_input

# kill_app: the task SIGKILLs the whole application (it runs in a session of its own).
TASK_ACTIONS = ("kill", "raise", "kill_app")
# Seconds one application run may take before the soak gives up on it.
APP_TIMEOUT_S = 1800.0
# Seconds for topic creation.
ADMIN_TIMEOUT_S = 30.0
MAX_PARALLELISM = 3
# The soak drives a Kafka sink: its tasks commit their own transactions, so the
# coordinator never logs a decision nor delivers one, and those faults would never fire.
SOAK_DRIVER_STEPS = tuple(
    s
    for s in DRIVER_STEPS
    if s
    not in ("driver_after_decision", "driver_after_partition_delivered", "driver_after_delivered")
)


def draw_faults(rng: random.Random, n: int, epochs: int) -> tuple[list[dict[str, Any]], int]:
    """Return ``n`` faults: task/driver faults for the sink's plan, and app kills (counted)."""
    faults: list[dict[str, Any]] = []
    app_kills = 0
    for i in range(n):
        kind = rng.choice(("task", "task", "driver", "app"))
        epoch = rng.randrange(epochs)
        if kind == "app":
            app_kills += 1
            continue
        if kind == "driver":
            faults.append(
                {
                    "id": f"f{i}",
                    "step": rng.choice(SOAK_DRIVER_STEPS),
                    "epoch": epoch,
                    "action": "kill",
                    "times": 1,
                }
            )
            continue
        step = rng.choice(TASK_STEPS)
        fault: dict[str, Any] = {
            "id": f"f{i}",
            "step": step,
            "epoch": epoch,
            "partition": rng.randrange(2),
            "action": rng.choice(TASK_ACTIONS),
            "times": 1,
        }
        if step == "mid_write":
            fault["after_rows"] = rng.randrange(1, 50)
        faults.append(fault)
    return faults, app_kills


def fired_faults(plan_path: Path, faults: list[dict[str, Any]]) -> Counter[str]:
    """Count fired faults by type (``step/action``) from the plan's claim files."""
    out: Counter[str] = Counter()
    for f in faults:
        if list(plan_path.parent.glob(f"{plan_path.name}.{f['id']}.*")):
            out[f"{f['step']}/{f['action']}"] += 1
    return out


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m integration_tests.support.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--faults", type=int, default=20)
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--mode", choices=("aligned", "unaligned"), default="unaligned")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    p.add_argument("--work-dir", default=None)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the soak (module docstring); return 0 when no anomaly was found, else 1."""
    args = _args(argv)
    console = Console()
    rng = random.Random(args.seed)
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="eos-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    broker = None
    bootstrap = args.bootstrap_servers
    if not bootstrap:
        from minikafka import BrokerProcess

        broker = BrokerProcess(data_dir=str(work / "broker"), port=0).start()
        bootstrap = broker.bootstrap_servers
    try:
        return _soak(args, console, rng, work, bootstrap)
    finally:
        if broker is not None:
            broker.terminate()


def _soak(
    args: argparse.Namespace, console: Console, rng: random.Random, work: Path, bootstrap: str
) -> int:
    started = time.monotonic()
    suffix = uuid.uuid4().hex[:8]
    inp, out, sink_id = f"soak-in-{suffix}", f"soak-out-{suffix}", f"soak-{suffix}"
    admin = _clients.admin(_clients.Cluster(bootstrap_servers=bootstrap))
    for name, parts in ((inp, 2), (out, 3)):
        admin.create_topics([NewTopic(name, parts, -1)])[name].result(timeout=ADMIN_TIMEOUT_S)
    with _progress(console) as prog:
        task = prog.add_task("producing input", total=args.records)
        produce_input(
            bootstrap, inp, args.records, on_progress=lambda n: prog.update(task, completed=n)
        )
    epochs = chunk_input(bootstrap, inp, work / "input", -(-args.records // args.epochs))
    faults, app_kills = draw_faults(rng, args.faults, epochs)
    plan = work / "faults.json"
    plan.write_text(json.dumps(faults))
    base = PipelineConfig(
        bootstrap=bootstrap,
        input_dir=str(work / "input"),
        checkpoint=str(work / "checkpoint"),
        output_topic=out,
        sink_id=sink_id,
        mode=args.mode,
        fault_plan=str(plan),
        master="local[4,4]",
        parallelism=2,
    )
    runs, killed = _run_all(base, work, rng, epochs, app_kills, args.records, console)
    with console.status("checking every invariant"):
        report = check_exactly_once(
            bootstrap,
            input_topic=inp,
            output_topic=out,
            sink_id=sink_id,
            parallelism=MAX_PARALLELISM,
        )
    print_report(report, console)
    summary = Table(title="soak summary")
    summary.add_column("measure")
    summary.add_column("value", justify="right")
    summary.add_row("records checked", f"{report.input_records:,}")
    summary.add_row("epochs", str(epochs))
    summary.add_row("application runs", str(runs))
    for name, n in sorted(fired_faults(plan, faults).items()):
        summary.add_row(f"fault fired: {name}", str(n))
    summary.add_row("fault fired: whole app SIGKILL (from outside)", str(killed))
    summary.add_row("faults planned (not all epochs reached them)", str(args.faults))
    for kind in TOPIC_KINDS:
        summary.add_row(f"anomalies: {kind.value}", str(report.count(kind)))
    summary.add_row("elapsed", f"{time.monotonic() - started:,.0f} s")
    console.print(summary)
    return 0 if report.ok else 1


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )


def _run_all(
    base: PipelineConfig,
    work: Path,
    rng: random.Random,
    epochs: int,
    app_kills: int,
    records: int,
    console: Console,
) -> tuple[int, int]:
    committed: dict[int, int] = {}
    kills_left, killed, runs = app_kills, 0, 0
    with _progress(console) as prog:
        task = prog.add_task("records committed", total=records)

        def on_epoch(line: EpochLine) -> None:
            if line.committed and not line.skipped:
                committed[line.epoch] = line.rows
            prog.update(task, completed=sum(committed.values()))

        while True:
            runs += 1
            cfg = PipelineConfig(
                **{**base.__dict__, "parallelism": rng.randint(1, MAX_PARALLELISM)}
            )
            app = AppProcess(cfg, work / "apps", f"run{runs}", allow_kill_app=True).start(on_epoch)
            if kills_left:
                after = rng.randint(1, max(1, epochs // (app_kills + 1)))
                target = len(app.epochs) + after

                def reached(a: AppProcess, n: int = target) -> bool:
                    return len(a.epochs) >= n

                if app.wait_for(reached, APP_TIMEOUT_S) and not app.done:
                    app.kill()
                    kills_left -= 1
                    killed += 1
                    prog.console.print(f"[yellow]killed application run {runs}[/]")
                    continue
            code = app.wait(APP_TIMEOUT_S)
            if code == 0 and app.done:
                return runs, killed
            prog.console.print(
                f"[yellow]run {runs} stopped (exit {code}): {app.short_failure()}[/]"
            )
            if runs > 4 * (app_kills + 10) + len(committed):
                raise SystemExit("the soak query does not make progress; see " + str(work))


if __name__ == "__main__":
    sys.exit(main())
