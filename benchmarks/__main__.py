"""Run every benchmark in turn: ``python -m benchmarks`` (or ``make bench``).

Each benchmark prints its own table and saves a PNG plot under ``benchmarks/results/``;
each can also run alone as ``python -m benchmarks.bench_<name> --help``.
"""

from __future__ import annotations

import importlib
import sys

from rich.console import Console

BENCHMARKS = (
    "bench_minikafka",
    "bench_sink",
    "bench_job",
    "bench_writer",
    "bench_clients",
    "bench_source",
    "bench_async_io",
    "bench_postgres",
    "bench_pg_write",
    "bench_lakehouse",
    "bench_cluster",
)


def main() -> int:
    """Run all benchmarks with their default settings; return the worst exit code."""
    console = Console()
    worst = 0
    for name in BENCHMARKS:
        console.rule(f"[bold]benchmarks.{name}")
        module = importlib.import_module(f"benchmarks.{name}")
        code = module.main([])
        worst = max(worst, int(code or 0))
    return worst


if __name__ == "__main__":
    sys.exit(main())
