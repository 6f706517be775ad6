"""What opening a write task's Kafka clients costs: new, pre-created and pooled clients.

Run ``python -m benchmarks.bench_clients`` (``--help`` for options). It starts a minikafka
broker in a subprocess (or uses ``--bootstrap-servers`` / ``KAFKA_BOOTSTRAP_SERVERS``) and
times, ``--trials`` times each, with the sink's producer settings
(``connectors.kafka._sink._producers.new_producer``):

* ``new producer``: create a transactional producer and ``init_transactions`` at once
  (what a write task does when its worker has no pooled producer);
* ``new producer after list_topics``: the same, with a metadata request first;
* ``pre-created producer``: ``init_transactions`` on a producer created ``--idle`` seconds
  earlier and never initialized (a spare: creating a producer fences nothing, only
  ``init_transactions`` does);
* ``new marker consumer`` / ``warm marker consumer``: the first and a later
  ``committed()`` of a marker consumer (``connectors.kafka._sink._markers``).

Why it matters: a write task whose partition ran in another Python worker last epoch
needs a new producer, and librdkafka 2.16 makes a just-created transactional producer
wait for its 500 ms coordinator-query timer in about half of the cases (it drops the
bootstrap connection after the first metadata answer). See benchmarks/HISTORY.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from benchmarks._broker import broker
from benchmarks._plot import bar_plot
from benchmarks._table import print_table
from connectors.kafka import KafkaSink
from connectors.kafka._sink._markers import marker_consumer, read_marker
from connectors.kafka._sink._producers import INIT_TIMEOUT_S, new_producer
from connectors.kafka._sink._writer import DeliveryErrors

RESULTS = Path(__file__).parent / "results"
# Seconds for topic creation.
ADMIN_TIMEOUT_S = 30.0


def _timed(call: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument(
        "--idle",
        type=float,
        default=1.0,
        help="seconds a pre-created producer waits before init_transactions",
    )
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    args = parser.parse_args(argv)
    console = Console()
    times: dict[str, list[float]] = {
        "new producer": [],
        "new producer after list_topics": [],
        "pre-created producer": [],
        "new marker consumer": [],
        "warm marker consumer": [],
    }
    load = os.getloadavg()[0]
    with (
        broker(args.bootstrap_servers) as bootstrap,
        Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress,
    ):
        run = uuid.uuid4().hex[:8]
        cfg = KafkaSink(bootstrap, f"clients-{run}", f"clients-{run}").config
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(cfg.marker_topic, 1, 1)])[cfg.marker_topic].exception(
            ADMIN_TIMEOUT_S
        )  # None, or "already exists": either is fine
        bar = progress.add_task("trials", total=args.trials)
        for i in range(args.trials):
            txn = cfg.transactional_id(i)
            fresh = new_producer(cfg, f"{txn}-new", DeliveryErrors())
            times["new producer"].append(
                _timed(lambda p=fresh: p.init_transactions(INIT_TIMEOUT_S))
            )
            listed = new_producer(cfg, f"{txn}-listed", DeliveryErrors())
            times["new producer after list_topics"].append(
                _timed(
                    lambda p=listed: (
                        p.list_topics(cfg.marker_topic, timeout=INIT_TIMEOUT_S),
                        p.init_transactions(INIT_TIMEOUT_S),
                    )
                )
            )
            spare = new_producer(cfg, f"{txn}-spare", DeliveryErrors())
            time.sleep(args.idle)
            times["pre-created producer"].append(
                _timed(lambda p=spare: p.init_transactions(INIT_TIMEOUT_S))
            )
            consumer = marker_consumer(cfg.cluster, cfg.marker_group(i))
            times["new marker consumer"].append(
                _timed(lambda c=consumer: read_marker(c, cfg.marker_topic))
            )
            times["warm marker consumer"].append(
                _timed(lambda c=consumer: read_marker(c, cfg.marker_topic))
            )
            consumer.close()
            progress.advance(bar)
    rows = [
        [
            name,
            round(1000 * statistics.median(v), 1),
            round(1000 * max(v), 1),
            sum(1 for x in v if x > 0.4),
        ]
        for name, v in times.items()
    ]
    print_table(
        f"Opening write-task clients, {args.trials} trials (load average {load:.1f})",
        ["client", "median ms", "max ms", "trials over 400 ms"],
        rows,
        console,
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "bench_clients.json").write_text(
        json.dumps({"load_average": load, "idle_s": args.idle, "seconds": times}, indent=1)
    )
    png = bar_plot(
        RESULTS / "bench_clients.png",
        "Opening write-task clients (median ms)",
        list(times),
        [1000 * statistics.median(v) for v in times.values()],
        "ms",
    )
    console.print(f"saved {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
