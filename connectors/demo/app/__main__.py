"""Subprocess entry of the streaming query: ``python -m connectors.demo.app CONFIG_JSON_FILE``.

Exit codes: 0 when the whole input was written (every chunk file, or the input topic up to
the offsets it had when the query started), or when SIGTERM stopped the query gracefully
after the epoch in flight (it prints ``STOPPED``); 3 when the query failed (the error is
printed to stderr). A driver-side fault of the config's fault plan kills this process with
SIGKILL, which is what the "whole application killed" tests need. Each finished micro-batch
prints an ``EPOCH {json}`` line on stdout.
"""

from __future__ import annotations

import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from connectors.demo.app._config import EpochLine, PipelineConfig
from connectors.demo.app._pipeline import make_spark, run_query

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

    from connectors.stage import TransactionalSink

EXIT_QUERY_FAILED = 3
_stopped = threading.Event()


def _stop_on_sigterm(sink: TransactionalSink, query: StreamingQuery) -> None:
    """SIGTERM: stop the query once the epoch in flight has committed (in a thread)."""

    def stop() -> None:
        _stopped.set()
        sink.stop_gracefully(query)

    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=stop, daemon=True).start())


def _print_epoch(line: EpochLine) -> None:
    print(line.to_line(), flush=True)


def main(argv: list[str] | None = None) -> int:
    """Run the query described by the JSON config file named in ``argv``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m connectors.demo.app CONFIG_JSON_FILE", file=sys.stderr)
        return 2
    cfg = PipelineConfig.from_json(Path(args[0]).read_text())
    spark = make_spark(cfg.master, app_name=f"eos-{cfg.sink_id}")
    try:
        run_query(spark, cfg, on_epoch=_print_epoch, on_start=_stop_on_sigterm)
    except Exception:  # noqa: BLE001 - report any query failure through the exit code
        if not _stopped.is_set():  # a batch refused by the stopping sink is no failure
            traceback.print_exc()
            return EXIT_QUERY_FAILED
    finally:
        spark.stop()
    print("STOPPED" if _stopped.is_set() else "DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
