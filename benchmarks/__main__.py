"""Run every benchmark in turn: ``python -m benchmarks`` (or ``make bench``).

``python -m benchmarks <name> [options]`` runs one of them (``latency`` is
``benchmarks.bench_latency``, ``growth`` ``benchmarks.bench_growth``), with its own options.

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
    "bench_latency",
    "bench_growth",
    "bench_task_floor",
)


def main(argv: list[str] | None = None) -> int:
    """Run all benchmarks with their default settings (or the one named); return the exit code."""
    args = sys.argv[1:] if argv is None else argv
    if args and not args[0].startswith("-"):
        name = args[0] if args[0].startswith("bench_") else f"bench_{args[0]}"
        if name not in BENCHMARKS:
            names = ", ".join(b.removeprefix("bench_") for b in BENCHMARKS)
            print(f"unknown benchmark {args[0]!r}; choose from {names}", file=sys.stderr)
            return 2
        return int(importlib.import_module(f"benchmarks.{name}").main(args[1:]) or 0)
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
